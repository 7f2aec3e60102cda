"""Which candidates a request may try, in order (§11 routing, §14 selection).

`Router` holds what selection needs between requests: the passive-health
table, the load book (in-flight counts, and under poll the queue other
gateways put on each provider) and the random source. The choice itself is
`grid.core.routing.selection.select` over the snapshot's precomputed plan:
session affinity first, then the mode's pick inside the active group, then
failover targets, at most ``1 + failover_max`` of them.

The proxy reports each attempt: `started` when it is sent (it returns the
attempt's start), `answered` with the status and that start (a 5xx counts
against passive health, anything else clears it; the wait is a latency
sample of the load estimate), `failed` for a failed connect, and `ended` when
its answer is over, streams and errors included, so in-flight counts always
come back down.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping

from grid.core.routing.load import LoadBook, LoadSettings
from grid.core.routing.passive_health import HealthSettings, PassiveHealth
from grid.core.routing.selection import Turn, select
from grid.core.vocabulary import CandidateKind
from grid.gateway.metrics import GatewayMetrics, Tally
from grid.gateway.snapshot import Candidate, Snapshot

KIND = CandidateKind.INFERENCE_MODEL
"""The candidate kind chat completions route to."""

_NONE: frozenset[str] = frozenset()


def attempts(
    snapshot: Snapshot,
    model: str,
    bound: str | None,
    failover_max: int,
    rng: random.Random | None = None,
) -> list[Candidate]:
    """The candidates to try, in order, with nothing ejected and no load known."""
    plan = snapshot.plans.get((KIND, model))
    if plan is None:
        return []
    return select(plan, bound, 1 + failover_max, rng or random.Random(0), _NONE, lambda _c: 0.0)


class Router:
    """Selection state of one gateway process."""

    def __init__(
        self,
        failover_max: int,
        metrics: GatewayMetrics,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        health: HealthSettings | None = None,
        load: LoadSettings | None = None,
    ) -> None:
        self.limit = 1 + failover_max
        self.metrics = metrics
        self.health = PassiveHealth(clock, health)
        self.loads = LoadBook(load)
        self._clock = clock
        self._rng = rng or random.Random()
        loads = self.loads

        def estimate(candidate: Candidate) -> float:
            return loads.estimate(candidate.stable_id)

        self._estimate = estimate
        self._idle = Tally()
        self._turns: dict[tuple[str, str], Turn] = {}
        """Round-robin position per (kind, model), kept across reloads and re-ranks."""

    def attempts(
        self, snapshot: Snapshot, model: str, bound: str | None, kind: str = KIND
    ) -> list[Candidate]:
        """The candidates to try for one request; counts the selection of the first.

        ``kind`` is the candidate kind: a model's by default, a tool's or agent's (§16)."""
        plan = snapshot.plans.get((kind, model))
        if plan is None:
            return []
        turn = self._turns.get((kind, model))
        if turn is None:
            turn = self._turns[(kind, model)] = Turn()
        tries = select(
            plan, bound, self.limit, self._rng, self.health.ejected(), self._estimate, turn
        )
        if tries:
            first = tries[0]
            self.metrics.selections.tally(first.cluster, first.selection_group).inc()
        return tries

    def started(self, candidate: Candidate) -> float:
        """An attempt to ``candidate`` is being sent; returns its start for `answered`."""
        self.metrics.in_flight.get(candidate.cluster, self._idle).value += 1
        return self.loads.start(candidate.stable_id, self._clock())

    def ended(self, candidate: Candidate) -> None:
        """The attempt's answer is over (relayed, broken off or abandoned)."""
        self.loads.end(candidate.stable_id)
        self.metrics.in_flight.get(candidate.cluster, self._idle).value -= 1

    def answered(self, candidate: Candidate, status: int, started: float | None = None) -> bool:
        """The cluster answered with ``status``: a 5xx counts as a failure, and
        anything else, given the attempt's ``started``, is a latency sample.
        True when that failure ejected the candidate."""
        if status >= 500:
            return self.failed(candidate)
        if started is not None:
            self.loads.answered(candidate.stable_id, started, self._clock())
        self.health.success(candidate.stable_id)
        return False

    def failed(self, candidate: Candidate) -> bool:
        """Connecting to the cluster failed (or it answered 5xx); True when this
        failure ejected the candidate."""
        if not self.health.failure(candidate.stable_id):
            return False
        ejections = self.metrics.ejections.get(candidate.cluster)
        if ejections is not None:
            ejections.inc()
        return True

    def take_reports(self, reported: Mapping[str, float]) -> None:
        """Waiting+running requests reported per candidate (poll mode)."""
        self.loads.take_report(reported, self._clock())

    def swapped(self, snapshot: Snapshot) -> None:
        """A new snapshot: forget the health and reports of candidates that left it,
        and the round-robin position of models that left it."""
        keep = snapshot.by_id
        self.health.forget(keep)
        self.loads.forget(keep)
        for key in [k for k in self._turns if k not in snapshot.plans]:
            del self._turns[key]
