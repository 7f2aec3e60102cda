"""The routing bench's pure parts: flags, scenarios, the arrival trace, statistics, the oracle.

Nothing here does I/O, so tests/bench checks it directly. ``bench/routing.py``
runs the processes and feeds the figures back through `strategy_figures`,
`cell_summary` and `shift_time`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

GRID_MODES = ("deterministic", "roundRobin", "random", "weightedRandom", "leastLoaded")
"""Every ``GridNetwork.spec.selectionPolicy.mode``, each a strategy of the bench."""
LITELLM_STRATEGIES = ("simple-shuffle", "least-busy", "latency-based-routing")
"""LiteLLM Router's ``routing_strategy`` values the bench compares against."""
ORACLE = "oracle"
RHOS = (0.5, 0.8, 0.95)
TARGET_RHO = 0.8
"""The offered load the targets are stated at."""
QUICK_RHOS = (TARGET_RHO,)
"""``--quick`` runs the targets' load only (a third of the full run's cells)."""
QUICK_DURATION_S, FULL_DURATION_S = 4.0, 20.0
DEGRADING_QUICK_S = 8.0
"""The degrading scenario's quick runs: long enough to see traffic move after the change."""
HOMOGENEOUS = "4:0.5,4:0.5,4:0.5,4:0.5"
HETEROGENEOUS = "2:1:2,4:1:4,8:1:8,16:1:16"
SHIFT_WINDOW_S = 2.0
"""Trailing window over which the slow provider's share of arrivals is taken."""
SHIFT_SHARE = 0.5
"""Traffic has moved off once the slow provider's share is at most this part of its
share before the change."""


class UsageError(ValueError):
    """A bad command-line value; ``flag`` names the flag."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


@dataclass(frozen=True)
class ProviderSpec:
    """One mock provider: concurrency slots, mean service time, capacityWeight."""

    capacity: int
    service_s: float
    weight: int = 1

    @property
    def rate(self) -> float:
        """Completions a second it serves when busy."""
        return self.capacity / self.service_s


@dataclass(frozen=True)
class Degrade:
    """Provider ``index``'s service time times ``factor`` from second ``at_s`` of a run."""

    index: int
    factor: float
    at_s: float


@dataclass(frozen=True)
class Scenario:
    name: str
    providers: tuple[ProviderSpec, ...]
    gateways: int
    rhos: tuple[float, ...]
    duration_s: float
    degrade: Degrade | None = None
    signal_transport: str = "gossip"


def strategy_name(strategy: str) -> str:
    """The JSON key of a strategy: Grid modes as named, ``litellm_least_busy`` and so on."""
    if strategy in LITELLM_STRATEGIES:
        return "litellm_" + strategy.replace("-", "_")
    return strategy


def _number(flag: str, text: str, kind: type[float] | type[int]) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise UsageError(flag, f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(flag, f"{text!r} is not finite")
    return value


def parse_providers(text: str) -> tuple[ProviderSpec, ...]:
    """``CAP:SERVICE_S[:WEIGHT],...`` as provider specs."""
    specs = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) not in (2, 3):
            raise UsageError("--providers", f"{item!r} is not CAP:SERVICE_S[:WEIGHT]")
        capacity = _number("--providers", parts[0], int)
        service = _number("--providers", parts[1], float)
        weight = _number("--providers", parts[2], int) if len(parts) == 3 else 1
        if capacity < 1 or service <= 0 or not 1 <= weight <= 1000:
            raise UsageError(
                "--providers", f"{item!r}: capacity >= 1, service > 0 s, weight 1..1000"
            )
        specs.append(ProviderSpec(int(capacity), float(service), int(weight)))
    return tuple(specs)


def parse_degrade(text: str, providers: int) -> Degrade:
    """``I:F:T`` (provider index, factor, second) checked against the provider count."""
    parts = text.split(":")
    if len(parts) != 3:
        raise UsageError("--degrade", f"{text!r} is not I:F:T")
    index = _number("--degrade", parts[0], int)
    factor = _number("--degrade", parts[1], float)
    at_s = _number("--degrade", parts[2], float)
    if not 0 <= index < providers:
        raise UsageError("--degrade", f"provider index {int(index)} is not in 0..{providers - 1}")
    if not 0 < factor <= 1000 or at_s < 0:
        raise UsageError("--degrade", "the factor must be in (0, 1000] and the second >= 0")
    return Degrade(int(index), float(factor), float(at_s))


def parse_rho(text: str) -> float:
    rho = _number("--rho", text, float)
    if not 0 < rho <= 1.5:
        raise UsageError("--rho", f"{rho:g} is not in (0, 1.5]")
    return rho


def check_positive(flag: str, value: float, most: float) -> None:
    if not 0 < value <= most:
        raise UsageError(flag, f"{value:g} is not in (0, {most:g}]")


def standard_scenarios(quick: bool) -> list[Scenario]:
    """The four scenarios of §14: each at every rho of `RHOS`, or quick at `TARGET_RHO` only."""
    duration = QUICK_DURATION_S if quick else FULL_DURATION_S
    rhos = QUICK_RHOS if quick else RHOS
    homogeneous = parse_providers(HOMOGENEOUS)
    slow = max(duration, DEGRADING_QUICK_S)
    return [
        Scenario("homogeneous", homogeneous, 1, rhos, duration),
        Scenario("heterogeneous", parse_providers(HETEROGENEOUS), 1, rhos, duration),
        Scenario("degrading", homogeneous, 1, rhos, slow, Degrade(0, 3.0, round(slow / 2, 3))),
        Scenario("three_gateways", homogeneous, 3, rhos, duration, signal_transport="poll"),
    ]


def offered_rate(providers: Sequence[ProviderSpec], rho: float) -> float:
    """Arrivals a second: ``rho`` of the providers' total service rate."""
    return rho * sum(p.rate for p in providers)


@dataclass(frozen=True)
class Arrival:
    at_s: float
    gateway: int


def poisson_trace(rate: float, duration_s: float, gateways: int, seed: str) -> tuple[Arrival, ...]:
    """Poisson arrivals at ``rate`` for ``duration_s``, each to a uniformly drawn gateway.

    The same ``seed`` gives the same trace, which every strategy replays.
    """
    rng = random.Random(seed)
    arrivals = []
    at = rng.expovariate(rate)
    while at < duration_s:
        arrivals.append(Arrival(round(at, 6), rng.randrange(gateways)))
        at += rng.expovariate(rate)
    return tuple(arrivals)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def strategy_figures(latencies: Sequence[float | None], elapsed_s: float) -> dict[str, float]:
    """``p50_s``, ``p99_s``, ``throughput_rps`` and ``errors`` of one strategy's run.

    ``latencies`` has one entry per arrival, None for a failed request;
    throughput counts the successes over ``elapsed_s`` (first arrival to last answer).
    """
    ok = [x for x in latencies if x is not None]
    return {
        "p50_s": round(percentile(ok, 50), 4),
        "p99_s": round(percentile(ok, 99), 4),
        "throughput_rps": round(len(ok) / elapsed_s, 2) if elapsed_s > 0 else 0.0,
        "errors": len(latencies) - len(ok),
        "requests": len(latencies),
    }


def _ratio(a: float, b: float) -> float | None:
    if not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
        return None
    return round(a / b, 3)


def cell_summary(strategies: dict[str, dict[str, float]]) -> dict[str, object]:
    """leastLoaded's p99 against the oracle, the best LiteLLM strategy and least-busy."""
    mine = strategies["leastLoaded"]["p99_s"]
    litellm = {
        name: row["p99_s"]
        for name, row in strategies.items()
        if name.startswith("litellm_") and math.isfinite(row["p99_s"])
    }
    best = min(litellm, key=lambda n: litellm[n]) if litellm else None
    busy = strategies.get(strategy_name("least-busy"))
    return {
        "p99_ratio_to_oracle": _ratio(mine, strategies[ORACLE]["p99_s"]),
        "p99_ratio_to_best_litellm": _ratio(mine, litellm[best]) if best else None,
        "best_litellm": best,
        "p99_ratio_to_litellm_least_busy": _ratio(mine, busy["p99_s"]) if busy else None,
    }


def expected_wait(outstanding: int, capacity: int, service_s: float) -> float:
    """Expected time to answer one more request at a provider with ``outstanding`` requests."""
    queued = outstanding + 1 - capacity
    return service_s * (1 + max(0, queued) / capacity)


def oracle_pick(
    outstanding: Sequence[int], capacities: Sequence[int], service_s: Sequence[float]
) -> int:
    """The provider a new request is answered soonest at, from the true queues.

    Ties go to the lower outstanding share of capacity, then to the lower index.
    """
    return min(
        range(len(outstanding)),
        key=lambda i: (
            expected_wait(outstanding[i], capacities[i], service_s[i]),
            outstanding[i] / capacities[i],
            i,
        ),
    )


def _share(
    samples: Sequence[tuple[float, Sequence[int]]], index: int, since: float, until: float
) -> float | None:
    """Provider ``index``'s share of the arrivals between two sample times (None if none)."""
    inside = [s for s in samples if since <= s[0] <= until]
    if len(inside) < 2:
        return None
    first, last = inside[0][1], inside[-1][1]
    total = sum(last) - sum(first)
    return (last[index] - first[index]) / total if total > 0 else None


def shift_time(
    samples: Sequence[tuple[float, Sequence[int]]], index: int, at_s: float
) -> float | None:
    """Seconds after ``at_s`` until provider ``index``'s share of arrivals has moved off.

    ``samples`` are (second of the run, requests each provider has received so
    far), in time order. Its share before the change is taken over the samples
    up to ``at_s``; traffic has moved off at the first sample after ``at_s``
    whose trailing `SHIFT_WINDOW_S` (at least half of it sampled) shows at most
    `SHIFT_SHARE` of that share. None when it never does (or nothing arrived
    before the change).
    """
    before = _share(samples, index, -math.inf, at_s)
    if not before:
        return None
    for t, _counts in samples:
        if t <= at_s:
            continue
        window = [s for s in samples if t - SHIFT_WINDOW_S <= s[0] <= t]
        share = _share(window, index, -math.inf, t)
        spans = window[0][0] <= t - SHIFT_WINDOW_S / 2
        if spans and share is not None and share <= SHIFT_SHARE * before:
            return round(t - at_s, 2)
    return None


def slow_shares(
    samples: Sequence[tuple[float, Sequence[int]]], index: int, at_s: float
) -> dict[str, float | None]:
    """Provider ``index``'s share of arrivals before the change, and from 1 s after it on."""
    before = _share(samples, index, -math.inf, at_s)
    after = _share(samples, index, at_s + 1.0, math.inf)
    return {
        "before": None if before is None else round(before, 3),
        "after": None if after is None else round(after, 3),
    }
