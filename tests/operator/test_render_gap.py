"""The render loop's gap, in virtual time: changes that keep coming render once per gap.

A stand-in round records the virtual time it starts at. A change that marks the view
dirty every 0.1 s for 10 s starts a round every 0.1 s without a gap, and at most one
per second with a 1 s gap; a change after a quiet spell still starts its round at once,
and the render interval still bounds the time between rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import pytest

from grid.operator.overlay_loop import render_rounds
from grid.testing.virtual_loop import VirtualTimeLoop


def rounds_started(
    gap_s: float, changes: list[float], run_s: float, interval_s: float = 5.0
) -> list[float]:
    """The virtual start times of the rounds, with the view marked dirty at ``changes``."""
    loop = VirtualTimeLoop()
    started: list[float] = []

    async def round_() -> None:
        started.append(loop.time())

    async def main() -> None:
        dirty = asyncio.Event()
        task = asyncio.create_task(render_rounds(dirty, interval_s, round_, gap_s=gap_s))
        # Virtual time: these sleeps place the inputs on the fake clock; nothing waits.
        for at in changes:
            await asyncio.sleep(max(0.0, at - loop.time()))
            dirty.set()
        await asyncio.sleep(max(0.0, run_s - loop.time()))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return started


CHURN = [0.05 + 0.1 * i for i in range(100)]
"""A change every 0.1 s for 10 s."""


def test_without_a_gap_every_change_starts_a_round() -> None:
    started = rounds_started(0.0, CHURN, 10.0)
    assert len([t for t in started if t > 0.0]) >= 95


def test_with_a_gap_changes_that_keep_coming_render_once_per_gap() -> None:
    started = rounds_started(1.0, CHURN, 10.0)
    gaps = [b - a for a, b in itertools.pairwise(started)]
    assert min(gaps) >= 1.0 - 1e-9
    assert 9 <= len(started) <= 11  # about one a second, the first at once
    assert started[-1] >= 9.0  # the changes still render, a gap late at most


def test_a_change_after_a_quiet_spell_starts_its_round_at_once() -> None:
    started = rounds_started(1.0, [0.5, 1.2, 3.0], 4.0)
    assert started == pytest.approx([0.5, 1.5, 3.0])


def test_the_render_interval_bounds_the_gap() -> None:
    started = rounds_started(1.0, CHURN, 10.0, interval_s=0.5)
    gaps = [b - a for a, b in itertools.pairwise(started)]
    assert max(gaps) <= 0.5 + 1e-6
    assert len(started) >= 19
