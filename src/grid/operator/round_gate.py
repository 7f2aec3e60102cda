"""Whether a render round has anything to do: a round that sees no change does nothing.

A round's output depends on the store's resources (GridNetwork spec, GridSites,
Secrets, InferenceProviders), on the replica's trusted snapshots, on this
site's own provider checks, on the site phases, and on time: a record turns
stale ``FRESHNESS_MAX_AGE_S`` after its sample and leaves the view
``staleCandidateTtlSeconds`` after it, and an origin's certificate expires.
`RoundGate` keeps a key of all of them but time, and the earliest moment at
which time alone would change the round. A round whose key is the last
rendered one, before that moment, is skipped: no store read, no render, no
serialisation, no digest, no write, no status patch. Each round counts as
``unchanged`` or ``rendered`` in ``grid_operator_render_rounds_total``.

Three cases always render, as they hold state the key does not see: the last
round failed somewhere (it is retried), the network's admissionPolicy is
``stabilized`` (its hysteresis is driven by time), and signals travel by poll
(the pulled signals arrive outside the replica).

Snapshots and the auth policy are immutable values replaced on every change,
so the key compares them by identity and holds them, so no identity is reused.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from grid.adapters.health_server import ClosedCounter
from grid.core.crdt.replica import GridState
from grid.core.resources.network_status import RoundOutcome
from grid.core.resources.phases import SitePhase
from grid.core.routing.admission_policy import stabilized

if TYPE_CHECKING:
    from grid.operator.overlay_loop import OverlayLoop
    from grid.operator.runtime import Operator

UNCHANGED, RENDERED = "unchanged", "rendered"


def network_inputs(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a GridNetwork event can change in a render: metadata but the resourceVersion,
    the spec, and the status's ``gridId`` (a status write of our own changes nothing else)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}
    return meta, obj.get("spec"), (obj.get("status") or {}).get("gridId")


class RoundGate:
    """Decides whether a render round may be skipped; counts each round's outcome."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.rounds = ClosedCounter(
            "grid_operator_render_rounds_total",
            "Render rounds by outcome: unchanged (nothing to do, skipped) or rendered.",
            "outcome",
            (UNCHANGED, RENDERED),
            registry,
        )
        self.store_epoch = 0
        """Bumped by every store event that can change a render."""
        self.providers_epoch = 0
        """Bumped by every own provider record or check result."""
        self._networks: dict[str, tuple[Any, ...]] = {}
        self._last: tuple[Any, ...] | None = None
        self._deadline = -math.inf

    def store_event(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Note one watch event; a GridNetwork whose inputs did not move is not a change."""
        if kind == "GridNetwork":
            name = str((obj.get("metadata") or {}).get("name", ""))
            inputs = network_inputs(obj)
            if self._networks.get(name) == inputs:
                return
            self._networks[name] = inputs
        self.store_epoch += 1

    def key(
        self,
        replica: GridState,
        phases: Mapping[str, SitePhase],
        extra: tuple[Any, ...] = (),
    ) -> tuple[Any, ...]:
        """The round's inputs but time: epochs, snapshots, trust and site phases."""
        snapshots = tuple((o, replica.snapshot(o)) for o in replica.origins())
        return (
            self.store_epoch,
            self.providers_epoch,
            replica.auth,
            replica.trust_expiry(),
            snapshots,
            tuple(sorted(phases.items())),
            extra,
        )

    def unchanged(self, key: tuple[Any, ...] | None, now_s: float) -> bool:
        """True (and counted) when ``key`` is the last rendered one and time moved nothing."""
        last = self._last
        if key is not None and last is not None and now_s < self._deadline and _same(key, last):
            self.rounds.inc(UNCHANGED)
            return True
        return False

    def rendered(self, key: tuple[Any, ...] | None, deadline: float) -> None:
        """Count a rendered round; ``key`` None (a round to repeat) never matches."""
        self.rounds.inc(RENDERED)
        self._last, self._deadline = key, deadline


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Equal keys; snapshots (and the auth policy) compare by identity, not by value."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x is y:
            continue
        if isinstance(x, tuple) and isinstance(y, tuple):
            if not _same(x, y):
                return False
        elif _is_value(x) and x == y:
            continue
        else:
            return False
    return True


def _is_value(x: object) -> bool:
    """Plain values compare by equality; anything else only by identity."""
    return x is None or isinstance(x, str | int | float | bool | SitePhase | frozenset)


def settled(
    round_: Callable[[], Awaitable[None]], settle_s: float
) -> Callable[[], Awaitable[None]]:
    """``round_``, started ``settle_s`` after it was asked for. Changes that arrive
    meanwhile (another provider's scrape, a peer's records a moment later) go into
    that one round: without it each starts a round of its own, and most of those
    render an overlay no different from the last."""

    async def run() -> None:
        if settle_s > 0:
            await asyncio.sleep(settle_s)
        await round_()

    return run


def trust_deadline(replica: GridState, now_s: float) -> float:
    """The first moment after ``now_s`` at which a verified origin's certificate expires."""
    return min((t for _o, t in replica.trust_expiry() if t > now_s), default=math.inf)


def round_key(operator: Operator) -> tuple[Any, ...] | None:
    """An operator's round inputs but time; None when the round must render anyway."""
    network = operator.served.network
    if (
        network is None
        or operator.signals.transport is not None
        or stabilized(network.spec) is not None
        or not operator.overlays.settled
    ):
        return None
    unread = (
        tuple(operator.providers.unresolved_secrets()),
        operator.swim_keys.unreadable,
        operator.budget_meter.save_failing,
    )
    return operator.gate.key(operator.replica, operator.sites.phases, unread)


LEDGER_APPLY_FAILED = "LedgerApplyFailed"
"""The reason the site's budget ledger ConfigMap could not be written."""


def round_outcome(
    overlays: OverlayLoop,
    unreadable: Iterable[str],
    ledger_failed: bool = False,
    modes: tuple[str, tuple[tuple[str, str], ...]] = ("", ()),
) -> RoundOutcome:
    """What the round's status reports of its gateways, its other writes and of
    unreadable Secrets."""
    failed = [(f"budgets of {g}", reason) for g, reason in overlays.apply_failed]
    if ledger_failed:
        failed.append(("ledger", LEDGER_APPLY_FAILED))
    return RoundOutcome(
        served=overlays.served,
        render_failed=tuple(overlays.render_failed),
        write_failed=tuple(overlays.write_failed),
        unreadable_secrets=tuple(sorted(set(unreadable))),
        apply_failed=tuple(failed),
        own_mode=modes[0],
        mode_mismatch=modes[1],
    )
