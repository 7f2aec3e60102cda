"""Guarded writes, rounds and tasks (`grid.operator.resilience`), in injected time."""

from __future__ import annotations

import asyncio
import random

import pytest
from prometheus_client import CollectorRegistry

from grid.core.retry import Backoff
from grid.operator.resilience import (
    RoundFailures,
    Supervisor,
    WriteFailed,
    WriteGuard,
    WriteSite,
    guarded_rounds,
)
from grid.operator.startup import StartupError
from grid.testing.faulty_store import RETRY_AFTER_S, fault_error


class Sleeps:
    """An injected sleep that records each wait and returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def _guard(sleeps: Sleeps, registry: CollectorRegistry) -> WriteGuard:
    return WriteGuard(registry, Backoff(attempts=3), sleep=sleeps, rng=random.Random(7))


async def test_a_throttled_write_waits_out_retry_after_then_succeeds() -> None:
    sleeps, registry = Sleeps(), CollectorRegistry()
    answers: list[BaseException | None] = [fault_error("429"), fault_error("429"), None]

    async def write() -> str:
        error = answers.pop(0)
        if error is not None:
            raise error
        return "written"

    assert await _guard(sleeps, registry).write(WriteSite.OVERLAY, write) == "written"
    assert len(sleeps.waits) == 2 and min(sleeps.waits) >= RETRY_AFTER_S
    labels = {"site": "overlay", "reason": "throttled"}
    assert registry.get_sample_value("grid_operator_write_retries_total", labels) == 2


@pytest.mark.parametrize(("fault", "tries"), [("403", 1), ("422", 1), ("503", 3), ("reset", 3)])
async def test_a_write_that_cannot_pass_is_given_up_and_counted(fault: str, tries: int) -> None:
    sleeps, registry = Sleeps(), CollectorRegistry()
    calls = 0

    async def write() -> None:
        nonlocal calls
        calls += 1
        raise fault_error(fault)

    guard = _guard(sleeps, registry)
    with pytest.raises(WriteFailed) as failed:
        await guard.write(WriteSite.LEDGER, write)
    assert calls == tries and len(sleeps.waits) == tries - 1
    reason = failed.value.failure.reason.value
    labels = {"site": "ledger", "reason": reason}
    assert registry.get_sample_value("grid_operator_write_failures_total", labels) == 1
    assert WriteSite.LEDGER in guard.failing


async def test_a_failed_round_is_counted_and_run_again_after_a_back_off() -> None:
    sleeps, registry = Sleeps(), CollectorRegistry()
    failures = RoundFailures(registry, sleep=sleeps, rng=random.Random(1))
    runs = 0

    async def round_() -> None:
        nonlocal runs
        runs += 1
        if runs < 4:
            raise fault_error("500")

    await guarded_rounds("render", failures, round_)
    assert runs == 4 and len(sleeps.waits) == 3
    assert all(0 < w <= Backoff().round_cap_s for w in sleeps.waits)
    assert registry.get_sample_value("grid_operator_round_failures_total", {"loop": "render"}) == 3


async def test_a_round_never_swallows_a_deliberate_exit() -> None:
    failures = RoundFailures(CollectorRegistry(), sleep=Sleeps())

    async def round_() -> None:
        raise StartupError("restart")

    with pytest.raises(StartupError):
        await guarded_rounds("render", failures, round_)


async def test_the_supervisor_restarts_a_failed_task_and_returns_a_deliberate_exit() -> None:
    registry = CollectorRegistry()
    supervisor = Supervisor(RoundFailures(registry, sleep=Sleeps()))
    starts = 0

    async def task() -> None:
        nonlocal starts
        starts += 1
        if starts < 3:
            raise OSError("reset")
        raise StartupError("GridNetwork spec.swim changed")

    supervisor.start("watch-GridNetwork", task)
    ended = await asyncio.wait_for(supervisor.run(asyncio.Event()), 5)
    assert isinstance(ended, StartupError) and starts == 3
    labels = {"task": "watch-GridNetwork"}
    assert registry.get_sample_value("grid_operator_task_restarts_total", labels) == 2


async def test_the_supervisor_returns_at_a_stop() -> None:
    supervisor = Supervisor(RoundFailures(CollectorRegistry(), sleep=Sleeps()))
    supervisor.start("idle", lambda: asyncio.sleep(3600))
    stop = asyncio.Event()
    stop.set()
    assert await asyncio.wait_for(supervisor.run(stop), 5) is None
    supervisor.tasks["idle"].cancel()
