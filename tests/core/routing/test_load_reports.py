"""Three gateways sharing four providers, with the others' queue reported once a second.

A virtual-time simulation (printed seed) of `leastLoaded` at each gateway: Poisson
arrivals at 80% of the providers' capacity, each provider 4 slots of about 0.5 s
with a FIFO queue behind them, and every second a report of each provider's
waiting and running requests reaches every gateway, as signals polls do. Taken
whole, the seconds-old report sends every gateway away from the same provider
and then onto it together; averaged (`LoadSettings.report_decay_s`), it does not.
"""

from __future__ import annotations

import heapq
import math
import random

from grid.core.routing.load import LoadBook, LoadSettings
from grid.core.routing.selection import RANDOM, ModelPlan, SelectionPolicy, select

PROVIDERS, SLOTS, SERVICE_S, GATEWAYS = 4, 4, 0.5, 3


class _Member:
    def __init__(self, stable_id: str) -> None:
        self.stable_id = stable_id
        self.admission = "new_and_existing"
        self.selection_group = 0
        self.traffic_weight = 1
        self.capacity_weight = 1


def _p99(seed: int, settings: LoadSettings, duration_s: float = 60.0) -> float:
    rng = random.Random(seed)
    members = [_Member(f"p{i}") for i in range(PROVIDERS)]
    plan = ModelPlan(members, SelectionPolicy(RANDOM, load_aware=True))
    books = [LoadBook(settings) for _ in range(GATEWAYS)]
    rate = 0.8 * PROVIDERS * SLOTS / SERVICE_S
    events: list[tuple[float, int, tuple[int, int, float, float]]] = []
    at = rng.expovariate(rate)
    while at < duration_s:
        events.append((at, 0, (rng.randrange(GATEWAYS), -1, at, at)))
        at += rng.expovariate(rate)
    heapq.heapify(events)
    busy, waiting = [0] * PROVIDERS, [[] for _ in range(PROVIDERS)]
    outstanding, latencies, next_report = [0] * PROVIDERS, [], 1.0

    def serve(i: int, now: float, request: tuple[int, int, float, float]) -> None:
        busy[i] += 1
        done = now + SERVICE_S * rng.uniform(0.8, 1.2)
        heapq.heappush(events, (done, 1, (request[0], i, request[2], request[3])))

    while events:
        now, kind, (gateway, i, arrived, started) = heapq.heappop(events)
        while now >= next_report:
            for book in books:
                book.take_report({f"p{k}": outstanding[k] for k in range(PROVIDERS)}, next_report)
            next_report += 1.0
        book = books[gateway]
        if kind == 0:
            (chosen,) = select(plan, None, 1, rng, (), lambda c, b=book: b.estimate(c.stable_id))
            i = int(chosen.stable_id[1:])
            request = (gateway, i, arrived, book.start(chosen.stable_id, now))
            outstanding[i] += 1
            if busy[i] < SLOTS:
                serve(i, now, request)
            else:
                waiting[i].append(request)
            continue
        busy[i] -= 1
        outstanding[i] -= 1
        book.answered(f"p{i}", started, now)
        book.end(f"p{i}")
        latencies.append(now - arrived)
        if waiting[i]:
            serve(i, now, waiting[i].pop(0))
    latencies.sort()
    return latencies[math.ceil(0.99 * len(latencies)) - 1]


def test_averaged_reports_keep_three_gateways_from_herding() -> None:
    seed = 20261206
    print(f"seed {seed}")
    seeds = range(seed, seed + 4)
    whole = sum(_p99(s, LoadSettings(report_decay_s=0.0)) for s in seeds) / 4
    averaged = sum(_p99(s, LoadSettings()) for s in seeds) / 4
    print(f"p99 with reports taken whole {whole:.3f} s, averaged {averaged:.3f} s")
    # 4 slots of 0.5 s: a request that never waits takes 0.4 to 0.6 s.
    assert averaged < 0.85 * whole
    assert averaged < 1.3
