"""A virtual-time model of gateways selecting among providers (SPEC-DECISIONS §14).

Poisson arrivals, split evenly over the gateways, at ``rho`` of the providers'
total service rate; each provider serves ``slots`` requests at once, about
``service_s`` each (uniform within ±20%), with a FIFO queue behind them, and
optionally slows by ``factor`` from ``at_s``. ``leastLoaded`` runs the
production `select` and `LoadBook`, with every provider's waiting and running
requests reported to every gateway every ``report_every_s`` (as signals polls
do; ``None``: no reports). The other strategies are the rules a user would
compare it with: round robin and least-busy (the fewest of this gateway's own
requests in flight, LiteLLM's ``least-busy``) per gateway, and an oracle that
sends each request where it would finish soonest, from the true queues and
service times.

No clock, no sockets: the same seed gives the same latencies.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass, field

from grid.core.routing.load import LoadBook, LoadSettings
from grid.core.routing.selection import RANDOM, ModelPlan, SelectionPolicy, select
from grid.core.vocabulary import AdmissionState

__all__ = ["STRATEGIES", "Degrade", "Model", "SimMember", "p99", "simulate"]

STRATEGIES = ("oracle", "roundRobin", "leastBusy", "leastLoaded")


@dataclass
class SimMember:
    """The candidate fields selection reads."""

    stable_id: str
    capacity_weight: int = 1
    admission: AdmissionState = AdmissionState.NEW_AND_EXISTING
    selection_group: int = 0
    traffic_weight: int = 1


@dataclass(frozen=True)
class Degrade:
    """Provider ``index`` serves ``factor`` times slower from ``at_s``."""

    index: int
    factor: float
    at_s: float


@dataclass(frozen=True)
class Model:
    """One scenario of the model."""

    slots: tuple[int, ...] = (4, 4, 4, 4)
    service_s: float = 0.5
    gateways: int = 1
    rho: float = 0.8
    duration_s: float = 60.0
    degrade: Degrade | None = None
    report_every_s: float | None = 1.0
    settings: LoadSettings = field(default_factory=LoadSettings)


@dataclass
class _Run:
    model: Model
    rng: random.Random
    events: list[tuple[float, int, int, tuple[int, int, float, float]]] = field(
        default_factory=list
    )
    seq: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        n = len(self.model.slots)
        self.busy, self.outstanding = [0] * n, [0] * n
        self.waiting: list[list[tuple[int, int, float, float]]] = [[] for _ in range(n)]

    def factor(self, i: int, now: float) -> float:
        d = self.model.degrade
        return d.factor if d is not None and i == d.index and now >= d.at_s else 1.0

    def push(self, at: float, kind: int, request: tuple[int, int, float, float]) -> None:
        heapq.heappush(self.events, (at, kind, next(self.seq), request))

    def admit(self, i: int, now: float, request: tuple[int, int, float, float]) -> None:
        self.outstanding[i] += 1
        if self.busy[i] < self.model.slots[i]:
            self.serve(i, now, request)
        else:
            self.waiting[i].append(request)

    def serve(self, i: int, now: float, request: tuple[int, int, float, float]) -> None:
        self.busy[i] += 1
        service = self.model.service_s * self.factor(i, now) * self.rng.uniform(0.8, 1.2)
        self.push(now + service, 1, (request[0], i, request[2], request[3]))

    def finish_time(self, i: int, now: float) -> float:
        """When one more request sent to provider ``i`` now would be answered, expected."""
        service = self.model.service_s * self.factor(i, now)
        slots = self.model.slots[i]
        return max(0, self.outstanding[i] - slots + 1) * service / slots + service


def simulate(model: Model, strategy: str, seed: int) -> list[float]:
    """Every request's latency, from arrival to answer, under ``strategy``."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}")
    rng = random.Random(seed)
    run = _Run(model, rng)
    chooser = _Chooser(model, strategy, rng, run)
    rate = model.rho * sum(model.slots) / model.service_s
    at = rng.expovariate(rate)
    while at < model.duration_s:
        run.push(at, 0, (rng.randrange(model.gateways), -1, at, at))
        at += rng.expovariate(rate)
    latencies: list[float] = []
    every = model.report_every_s
    next_report = math.inf if every is None else every
    while run.events:
        now, kind, _seq, (gateway, i, arrived, started) = heapq.heappop(run.events)
        while every is not None and now >= next_report:
            chooser.report(next_report)
            next_report += every
        book = chooser.books[gateway]
        if kind == 0:
            i = chooser.choose(gateway, now)
            run.admit(i, now, (gateway, i, arrived, book.start(chooser.ids[i], now)))
            continue
        run.busy[i] -= 1
        run.outstanding[i] -= 1
        book.answered(chooser.ids[i], started, now)
        book.end(chooser.ids[i])
        latencies.append(now - arrived)
        if run.waiting[i]:
            run.serve(i, now, run.waiting[i].pop(0))
    return latencies


class _Chooser:
    """One strategy's choice at each gateway, and its reports."""

    def __init__(self, model: Model, strategy: str, rng: random.Random, run: _Run) -> None:
        n = len(model.slots)
        self.ids = [f"p{i}" for i in range(n)]
        members = [SimMember(self.ids[i], capacity_weight=model.slots[i]) for i in range(n)]
        self.plan = ModelPlan(members, SelectionPolicy(RANDOM, load_aware=True))
        self.books = [LoadBook(model.settings) for _ in range(model.gateways)]
        self.turns = [0] * model.gateways
        self.strategy, self.rng, self.run = strategy, rng, run

    def report(self, at: float) -> None:
        """Every provider's waiting and running requests reach every gateway."""
        outstanding = self.run.outstanding
        report = {stable_id: float(outstanding[k]) for k, stable_id in enumerate(self.ids)}
        for book in self.books:
            book.take_report(report, at)

    def choose(self, gateway: int, now: float) -> int:
        """The provider a request arriving at ``gateway`` goes to."""
        book, n = self.books[gateway], len(self.ids)
        if self.strategy == "leastLoaded":
            (chosen,) = select(
                self.plan, None, 1, self.rng, (), lambda c: book.estimate(c.stable_id)
            )
            return self.ids.index(chosen.stable_id)
        if self.strategy == "roundRobin":
            turn = self.turns[gateway]
            self.turns[gateway] = turn + 1
            return turn % n
        if self.strategy == "oracle":
            cost = [self.run.finish_time(k, now) for k in range(n)]
        else:
            cost = [float(book.in_flight.get(stable_id, 0)) for stable_id in self.ids]
        least = min(cost)
        return self.rng.choice([k for k in range(n) if cost[k] == least])


def p99(latencies: list[float]) -> float:
    """The 99th percentile, nearest rank."""
    ordered = sorted(latencies)
    return ordered[math.ceil(0.99 * len(ordered)) - 1]
