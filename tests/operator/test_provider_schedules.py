"""Per-provider schedules in virtual time: own intervals, own timeouts, jitter, no coupling.

Two providers run on a `VirtualTimeLoop`, their checks stand-ins that record
the virtual time of each call. ``fast`` declares a 60 s health check and a
15 s scrape; ``slow`` hangs on every health check (5 s timeout) and scrape. Ten
virtual minutes must show each job at its own pace within the jitter, the
slow provider's timeouts never shifting the fast one, and no check at the old
shared pace.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import defaultdict
from typing import Any

from grid.core.crdt.record import ProviderRecord
from grid.core.resources import InferenceProvider
from grid.core.routing.metrics_mapping import ScrapedSignals, SignalValues
from grid.operator.providers import ProviderController, ProviderState
from grid.operator.schedule import JITTER_RATIO
from grid.testing.store import InMemoryStore
from grid.testing.virtual_loop import VirtualTimeLoop

RUN_S = 600.0
SAMPLES = (0.1, 0.2)
"""The queue depths the fast provider's scrapes report in turn, each twice."""


def provider(name: str, health: tuple[str, str], scrape: tuple[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "InferenceProvider",
        "metadata": {"name": name},
        "spec": {
            "gridNetworkRef": "prod",
            "backendKind": "local",
            "providerKind": "self_hosted",
            "models": [{"name": "m"}],
            "endpoint": "http://127.0.0.1:1",
            "healthCheck": {"path": "/health", "interval": health[0], "timeout": health[1]},
            "metricsConfig": {"interval": scrape[0], "timeout": scrape[1]},
        },
    }


def run_schedules(seed: int) -> tuple[dict[tuple[str, str], list[float]], list[float]]:
    calls: dict[tuple[str, str], list[float]] = defaultdict(list)
    records: list[float] = []
    loop = VirtualTimeLoop()

    async def health(state: ProviderState) -> bool:
        calls[state.provider.name, "health"].append(loop.time())
        if state.provider.name == "slow":
            await asyncio.sleep(3600)
        return True

    async def scrape(state: ProviderState) -> ScrapedSignals:
        seen = calls[state.provider.name, "scrape"]
        seen.append(loop.time())
        if state.provider.name == "slow":
            await asyncio.sleep(3600)
        # The signal moves on every other scrape: the scrapes between see the same sample.
        return ScrapedSignals(
            values=SignalValues(queue_depth=SAMPLES[len(seen) // 2 % 2]), healthy=True
        )

    def on_record(name: str, record: ProviderRecord | None) -> None:
        if name == "fast" and record is not None:
            records.append(loop.time())

    async def main() -> None:
        store = InMemoryStore()
        docs = [
            provider("fast", ("60s", "2s"), ("15s", "2s")),
            provider("slow", ("10s", "5s"), ("20s", "5s")),
        ]
        providers = [InferenceProvider.model_validate(await store.create(d)) for d in docs]
        ctl = ProviderController(
            store, "east", on_record, 5.0, health=health, scrape=scrape, rng=random.Random(seed)
        )
        ctl.sync(providers)
        await asyncio.sleep(RUN_S)
        await ctl.stop()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return calls, records


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def within(values: list[float], interval: float) -> bool:
    low, high = interval * (1 - JITTER_RATIO), interval * (1 + JITTER_RATIO)
    return all(low - 1e-6 <= v <= high + 1e-6 for v in values)


def test_each_job_keeps_its_own_pace_and_a_slow_provider_delays_no_other() -> None:
    seed = random.randrange(2**32)
    print(f"schedule seed {seed}")
    calls, records = run_schedules(seed)
    fast_health, fast_scrape = calls["fast", "health"], calls["fast", "scrape"]
    assert fast_health[0] == 0.0 and fast_scrape[0] == 0.0
    assert within(gaps(fast_health), 60.0), gaps(fast_health)
    assert 9 <= len(fast_health) <= 12
    assert within(gaps(fast_scrape), 15.0), gaps(fast_scrape)
    assert 37 <= len(fast_scrape) <= 45
    # The slow provider's hung checks end at their timeout; their next run starts one
    # interval after the previous start, so a hang never stretches its own pace either.
    assert within(gaps(calls["slow", "health"]), 10.0), gaps(calls["slow", "health"])
    assert 55 <= len(calls["slow", "health"]) <= 67
    assert within(gaps(calls["slow", "scrape"]), 20.0), gaps(calls["slow", "scrape"])
    assert 28 <= len(calls["slow", "scrape"]) <= 34
    # The fast provider's record is re-published every 5 s (jittered), never held up.
    assert max(gaps(sorted(set(records)))) <= 5.0 * (1 + JITTER_RATIO) + 1e-6


def test_jitter_spreads_providers_declared_together() -> None:
    first, _ = run_schedules(1)
    second, _ = run_schedules(2)
    assert first["fast", "scrape"] != second["fast", "scrape"]


def test_a_record_is_handed_on_only_when_it_is_news() -> None:
    """After a scrape whose sample moved; after the refresh pace with none handed on;
    never after a check (a health check, or a scrape that saw the same sample) that
    changed nothing in the record but its time."""
    calls, records = run_schedules(random.randrange(2**32))
    scraped = calls["fast", "scrape"]
    moved = {at for i, at in enumerate(scraped, 1) if i == 1 or i % 2 == 0}
    same = set(scraped) - moved
    handed = sorted(set(records))
    assert moved <= set(handed)
    for before, at in itertools.pairwise(handed):
        assert at in moved or at - before >= 5.0 * (1 - JITTER_RATIO) - 1e-6, (before, at)
    assert not ((same | set(calls["fast", "health"][1:])) - moved) & set(handed)
