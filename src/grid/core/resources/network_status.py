"""What one site's operator writes into its GridNetwork's status, and for which gateways.

The operator serves the gateways of the network that run at its site. It writes
the status in two moments, each a patch of only the fields that differ, so a
steady state writes nothing:

* at start, `start_patch`: the gridId on first join (``spec.gridId`` when pinned,
  else a fresh one) and Pending -> Initializing with reason ``Starting``;
* after each render round, `rendered_patch`: the phase, the four conditions,
  the count of Active sites and one `overlay_entry` per rendered gateway.

The phase says no more than the operator knows. ``Active`` needs every served
gateway's overlay rendered and written at the current revision (so a network
whose site serves no gateway stays ``Initializing``); ``Degraded`` is any
render or write failure, any Unreachable site or any Secret that cannot be
read, with the reason of the first that holds. The conditions, in the
Kubernetes shape, say each truth on its own:

* ``OverlaysDistributed``: ``Rendered``, or ``NoGateway``, ``RenderFailed``, ``WriteFailed``;
* ``SitesReachable``: ``AllReachable``, or ``SitesUnreachable`` (naming them);
* ``SecretsResolved``: ``Resolved``, or ``SecretUnreadable`` (naming the references);
* ``Ready``: all three hold (reason ``Active``), else the first failing reason.

A condition's ``lastTransitionTime`` moves only when its status flips, and its
message names only sorted object names, so a steady truth writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from grid.core.resources.lifecycle import next_network_phase
from grid.core.resources.models import GridNetwork
from grid.core.resources.network_spec import GatewayRef
from grid.core.resources.phases import NetworkPhase, SitePhase
from grid.core.resources.status import conditions_draft


def served_gateways(network: GridNetwork, site: str) -> list[GatewayRef]:
    """The network's gateways that run at ``site`` (no ``localSiteName`` means any site)."""
    return [ref for ref in network.spec.gateway_refs if (ref.local_site_name or site) == site]


def overlay_entry(
    *, gateway: str, namespace: str, config_map: str, revision: str, candidates: int
) -> dict[str, Any]:
    """One ``status.overlays`` item, as written: a gateway's rendered overlay ConfigMap."""
    return {
        "gateway": gateway,
        "namespace": namespace,
        "configMap": config_map,
        "revision": revision,
        "candidateCount": candidates,
        "phase": "Rendered",
    }


def start_patch(network: GridNetwork, fresh_grid_id: Callable[[], str]) -> dict[str, Any]:
    """The status patch of an operator starting to serve ``network``; {} when none is due.

    ``fresh_grid_id`` is called only when the network has no gridId yet and the
    spec pins none.
    """
    status = network.status
    patch: dict[str, Any] = {}
    if network.spec.grid_id and (status is None or status.grid_id != network.spec.grid_id):
        patch["gridId"] = network.spec.grid_id
    elif status is None or not status.grid_id:
        patch["gridId"] = fresh_grid_id()
    # Only Pending moves at start; an Active or Degraded network keeps its phase
    # until the first render round has judged it.
    phase = network.phase
    if phase is NetworkPhase.PENDING:
        phase = next_network_phase(phase, started=True, rendered=False, unreachable_sites=0)
    if phase is not network.phase:
        patch.update(phase=phase.value, reason="Starting")
    if patch:
        patch["observedGeneration"] = network.metadata.generation
    return patch


@dataclass(frozen=True)
class RoundOutcome:
    """What one render round met besides the overlays it produced.

    ``served`` counts the gateways this site serves; ``render_failed`` and
    ``write_failed`` name the gateways whose overlay failed to render or to be
    written; ``unreadable_secrets`` names (``namespace/name``) the referenced
    Secrets that could not be read. Names only: never a Secret's content.
    """

    served: int
    render_failed: tuple[str, ...] = ()
    write_failed: tuple[str, ...] = ()
    unreadable_secrets: tuple[str, ...] = ()
    apply_failed: tuple[tuple[str, str], ...] = ()
    own_mode: str = ""
    """The signal mode this site runs ("" when the caller does not judge modes)."""
    mode_mismatch: tuple[tuple[str, str], ...] = ()
    """(site, mode) of each peer gossiping another signal mode (`mismatched`)."""
    """(what, reason) of the round's other writes the store did not take: a gateway's
    budget view (``BudgetsApplyFailed``), the site's ledger (``LedgerApplyFailed``)."""


MISMATCH_CONDITION = "SignalTransportMismatch"
"""The GridNetwork condition that is ``True`` while a peer runs another signal mode."""


def mismatched(own: str, peers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """(site, mode) of every peer whose gossiped mode is known and not ``own``, by site.

    A mixed mesh scores every remote signal as neutral (seed 000: the network
    selects, grid-wide, how signals cross sites), so each site reports it. A peer
    that gossips no mode (it predates the field) is never a mismatch.
    """
    return tuple((site, mode) for site, mode in sorted(peers.items()) if mode and mode != own)


def mismatch_verdict(
    own: str, peers: tuple[tuple[str, str], ...]
) -> tuple[Literal["True", "False"], str, str]:
    """The ``SignalTransportMismatch`` condition's status, reason and message."""
    if not peers:
        return "False", "ModesAgree", f"every peer that gossips its mode runs {own}"
    listed = ", ".join(f"{site} ({mode})" for site, mode in peers)
    return "True", "PeerModeDiffers", f"this site runs {own}; peers in another mode: {listed}"


Verdict = tuple[bool, str, str]
"""A condition's truth, reason and message."""


def _overlays_verdict(outcome: RoundOutcome) -> Verdict:
    if outcome.served == 0:
        return False, "NoGateway", "no gateway of the network runs at this site"
    if outcome.render_failed:
        return False, "RenderFailed", "render failed: " + ", ".join(sorted(outcome.render_failed))
    if outcome.write_failed:
        return False, "WriteFailed", "write failed: " + ", ".join(sorted(outcome.write_failed))
    if outcome.apply_failed:
        failed = sorted(outcome.apply_failed)
        return False, failed[0][1], "not written: " + ", ".join(f"{w} ({r})" for w, r in failed)
    return True, "Rendered", f"{outcome.served} overlay(s) rendered and written"


def _sites_verdict(site_phases: Mapping[str, SitePhase]) -> Verdict:
    down = sorted(n for n, p in site_phases.items() if p is SitePhase.UNREACHABLE)
    if down:
        return False, "SitesUnreachable", "unreachable: " + ", ".join(down)
    return True, "AllReachable", "no site is unreachable"


def _secrets_verdict(outcome: RoundOutcome) -> Verdict:
    if outcome.unreadable_secrets:
        names = ", ".join(sorted(outcome.unreadable_secrets))
        return False, "SecretUnreadable", "cannot read: " + names
    return True, "Resolved", "every referenced Secret was read"


def conditions_of(
    outcome: RoundOutcome, site_phases: Mapping[str, SitePhase]
) -> dict[str, Verdict]:
    """The four conditions' verdicts, ``Ready`` last."""
    verdicts = {
        "OverlaysDistributed": _overlays_verdict(outcome),
        "SitesReachable": _sites_verdict(site_phases),
        "SecretsResolved": _secrets_verdict(outcome),
    }
    failing = [v for v in verdicts.values() if not v[0]]
    ready: Verdict = (
        (True, "Active", "overlays distributed, sites reachable, secrets resolved")
        if not failing
        else (False, failing[0][1], failing[0][2])
    )
    verdicts["Ready"] = ready
    return verdicts


def _conditions_patch(
    network: GridNetwork, verdicts: Mapping[str, Verdict], now: str, outcome: RoundOutcome
) -> list[dict[str, Any]] | None:
    status = conditions_draft(network.status)
    changed = False
    for type_, (ok, reason, message) in verdicts.items():
        value: Literal["True", "False"] = "True" if ok else "False"
        changed |= status.set_condition(
            type_,
            value,
            reason=reason,
            message=message,
            now=now,
            observed_generation=network.metadata.generation,
        )
    # Written once a peer in another mode was seen, and kept (False) once they agree.
    if outcome.own_mode and (outcome.mode_mismatch or status.condition(MISMATCH_CONDITION)):
        mismatch, why, text = mismatch_verdict(outcome.own_mode, outcome.mode_mismatch)
        changed |= status.set_condition(
            MISMATCH_CONDITION,
            mismatch,
            reason=why,
            message=text,
            now=now,
            observed_generation=network.metadata.generation,
        )
    if not changed:
        return None
    return [c.model_dump(by_alias=True, exclude_none=True, mode="json") for c in status.conditions]


def rendered_patch(
    network: GridNetwork,
    overlays: Sequence[Mapping[str, Any]],
    site_phases: Mapping[str, SitePhase],
    outcome: RoundOutcome,
    now: str,
    consumers: Sequence[Mapping[str, Any]] = (),
    budgets: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The status patch after a render round; {} when the status already says it all.

    ``network`` is the freshly read resource, ``overlays`` the `overlay_entry`
    items of this round, ``site_phases`` every GridSite's current phase,
    ``outcome`` what else the round met, ``now`` an RFC 3339 time for a
    condition that flips, ``consumers`` the round's ``consumerConfigStatus``
    items (§11) and ``budgets`` its ``budgetStatus`` items (§12).
    """
    status = network.status
    current = network.phase
    verdicts = conditions_of(outcome, site_phases)
    distributed = verdicts["OverlaysDistributed"][0]
    faults = sum(1 for key in ("OverlaysDistributed", "SecretsResolved") if not verdicts[key][0])
    unreachable = sum(1 for p in site_phases.values() if p is SitePhase.UNREACHABLE)
    phase = next_network_phase(
        current, started=True, rendered=distributed, unreachable_sites=unreachable, faults=faults
    )
    connected = sum(1 for p in site_phases.values() if p is SitePhase.ACTIVE)
    patch: dict[str, Any] = {}
    if phase is not current:
        reason = "Rendered" if phase is NetworkPhase.ACTIVE else verdicts["Ready"][1]
        patch.update(phase=phase.value, reason=reason)
    elif (
        phase is NetworkPhase.DEGRADED
        and status is not None
        and status.reason != verdicts["Ready"][1]
    ):
        patch["reason"] = verdicts["Ready"][1]
    if status is None or status.connected_sites != connected:
        patch["connectedSites"] = connected
    old = [
        o.model_dump(by_alias=True, exclude_none=True) for o in (status.overlays if status else [])
    ]
    new = [dict(o) for o in overlays]
    if old != new:
        patch["overlays"] = new
    conditions = _conditions_patch(network, verdicts, now, outcome)
    if conditions is not None:
        patch["conditions"] = conditions
    old_consumers = [
        c.model_dump(by_alias=True, exclude_none=True)
        for c in (status.consumer_config_status if status else [])
    ]
    new_consumers = [dict(c) for c in consumers]
    if old_consumers != new_consumers:
        patch["consumerConfigStatus"] = new_consumers
    old_budgets = [
        b.model_dump(by_alias=True, exclude_none=True)
        for b in (status.budget_status if status else [])
    ]
    new_budgets = [dict(b) for b in budgets]
    if old_budgets != new_budgets:
        patch["budgetStatus"] = new_budgets
    if patch:
        patch["observedGeneration"] = network.metadata.generation
    return patch
