"""What one site's operator writes into its GridNetwork's status, and for which gateways.

The operator serves the gateways of the network that run at its site. It writes
the status in two moments, each a patch of only the fields that differ, so a
steady state writes nothing:

* at start, `start_patch`: the gridId on first join (``spec.gridId`` when pinned,
  else a fresh one) and Pending -> Initializing with reason ``Starting``;
* after each render round, `rendered_patch`: the phase (Active, or Degraded
  while a peer site is Unreachable), the count of Active sites and one
  `overlay_entry` per rendered gateway.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from grid.core.resources.lifecycle import next_network_phase
from grid.core.resources.models import GridNetwork
from grid.core.resources.network_spec import GatewayRef
from grid.core.resources.phases import NetworkPhase, SitePhase


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
    phase = next_network_phase(network.phase, started=True, rendered=False, unreachable_sites=0)
    if phase is not network.phase:
        patch.update(phase=phase.value, reason="Starting")
    if patch:
        patch["observedGeneration"] = network.metadata.generation
    return patch


def rendered_patch(
    network: GridNetwork,
    overlays: Sequence[Mapping[str, Any]],
    site_phases: Mapping[str, SitePhase],
    consumers: Sequence[Mapping[str, Any]] = (),
    budgets: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The status patch after a render round; {} when the status already says it all.

    ``network`` is the freshly read resource, ``overlays`` the `overlay_entry`
    items of this round, ``site_phases`` every GridSite's current phase and
    ``consumers`` the round's ``consumerConfigStatus`` items (§11) and
    ``budgets`` its ``budgetStatus`` items (§12).
    """
    status = network.status
    current = network.phase
    unreachable = sum(1 for p in site_phases.values() if p is SitePhase.UNREACHABLE)
    phase = next_network_phase(current, started=True, rendered=True, unreachable_sites=unreachable)
    connected = sum(1 for p in site_phases.values() if p is SitePhase.ACTIVE)
    patch: dict[str, Any] = {}
    if phase is not current:
        patch.update(
            phase=phase.value,
            reason="SitesUnreachable" if phase is NetworkPhase.DEGRADED else "Rendered",
        )
    if status is None or status.connected_sites != connected:
        patch["connectedSites"] = connected
    old = [
        o.model_dump(by_alias=True, exclude_none=True) for o in (status.overlays if status else [])
    ]
    new = [dict(o) for o in overlays]
    if old != new:
        patch["overlays"] = new
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
