"""The embedded roster log: append-only, replayable, tailed by polling."""

from __future__ import annotations

import asyncio
from pathlib import Path

from grid.adapters.backbone import RosterEntry
from grid.adapters.backbone.roster_sqlite import SqliteRosterLog
from grid.testing.poll import eventually


async def test_appends_get_increasing_revisions_and_replay_in_order(tmp_path: Path) -> None:
    log = await SqliteRosterLog.open(tmp_path)
    first = await log.append("a1", "registered", "t1")
    second = await log.append("a1", "admitted", "t1")
    await log.close()
    assert second.revision > first.revision

    reopened = await SqliteRosterLog.open(tmp_path)
    try:
        assert await reopened.replay() == [first, second]
    finally:
        await reopened.close()


async def test_tail_sees_an_append_from_another_connection_within_a_second(
    tmp_path: Path,
) -> None:
    reader = await SqliteRosterLog.open(tmp_path, poll_interval_s=0.05)
    writer = await SqliteRosterLog.open(tmp_path)
    seen: list[RosterEntry] = []

    async def follow() -> None:
        async for entry in reader.tail(0):
            seen.append(entry)

    task = asyncio.create_task(follow())
    try:
        written = await writer.append("a1", "registered", "t1")
        await eventually(lambda: seen, "the follower sees the append", timeout_s=1.0)
        assert seen == [written]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await reader.close()
        await writer.close()


async def test_tail_starts_after_the_given_revision(tmp_path: Path) -> None:
    log = await SqliteRosterLog.open(tmp_path, poll_interval_s=0.01)
    try:
        first = await log.append("a1", "registered", "t1")
        second = await log.append("a1", "admitted", None)
        tail = log.tail(first.revision)
        assert await anext(tail) == second
        await tail.aclose()
    finally:
        await log.close()
