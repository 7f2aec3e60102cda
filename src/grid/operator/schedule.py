"""Per-provider job schedules: each check on its own interval and timeout, with jitter.

An InferenceProvider has up to three jobs: its ``health`` check (``healthCheck
{interval, timeout}``, run only with an endpoint), its ``scrape``
(``metricsConfig {interval, timeout}``, run only with an endpoint), and the
``publish`` of its record (every ``record_refresh_s``, no I/O, so the record's
freshness never waits on a check). `run_every` runs one job in its own task:
once at once, then every interval from the start of the previous run, each
interval stretched or shrunk by up to `JITTER_RATIO` so that many providers
declared together do not probe in lock-step. A run that outlasts its interval
is followed at once by the next; a run never overlaps itself.

Because each job is its own task, a provider whose endpoint hangs holds up only
that job, for at most its timeout; every other job and provider keeps its pace.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from grid.core.resources import InferenceProvider
from grid.core.resources.duration import parse_duration

JITTER_RATIO = 0.1
"""Largest relative deviation of one interval: 0.1 spreads a 60 s check over
54-66 s. More spreads load better; less keeps the declared pace tighter."""

INTERVAL_MIN_S = 0.05
"""Shortest interval a job runs at, whatever is declared, so a zero refresh
cannot spin the event loop."""


@dataclass(frozen=True)
class Job:
    """One periodic job of a provider."""

    name: str
    """``health``, ``scrape`` or ``publish``."""
    interval_s: float
    timeout_s: float


def provider_jobs(
    provider: InferenceProvider, refresh_s: float, metrics_default_s: float | None = None
) -> list[Job]:
    """The jobs a provider's spec declares, plus the record's re-publication.

    ``metrics_default_s`` is the GridNetwork's metricsRefreshInterval, the scrape
    interval of a metricsConfig that sets none.
    """
    spec = provider.spec
    jobs = []
    health = spec.health_check
    if health is not None and (health.endpoint or spec.endpoint):
        jobs.append(Job("health", parse_duration(health.interval), parse_duration(health.timeout)))
    metrics = spec.metrics_config
    if metrics is not None and (metrics.base_url or spec.endpoint):
        jobs.append(
            Job("scrape", metrics.interval_s(metrics_default_s), parse_duration(metrics.timeout))
        )
    jobs.append(Job("publish", refresh_s, refresh_s))
    return jobs


def jittered(interval_s: float, rng: random.Random, ratio: float = JITTER_RATIO) -> float:
    """``interval_s`` stretched or shrunk by up to ``ratio``, never below `INTERVAL_MIN_S`."""
    return max(INTERVAL_MIN_S, interval_s * (1.0 + rng.uniform(-ratio, ratio)))


async def run_every(job: Job, run: Callable[[], Awaitable[None]], rng: random.Random) -> None:
    """Run ``run`` now and then every jittered ``job.interval_s``, until cancelled.

    ``run`` enforces ``job.timeout_s`` itself (it knows what a timeout means
    for its job); the interval is measured from the start of each run.
    """
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await run()
        wait = started + jittered(job.interval_s, rng) - loop.time()
        await asyncio.sleep(max(0.0, wait))
