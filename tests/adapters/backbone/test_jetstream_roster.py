"""The roster log in a JetStream KV bucket: ordered replay and a prompt tail."""

from __future__ import annotations

import asyncio

import pytest

from grid.adapters.backbone import RosterEntry
from grid.adapters.backbone.jetstream import JetStreamRoster
from grid.testing.nats_server import NatsServer

pytestmark = pytest.mark.nats


async def _roster(url: str, isolation: str) -> JetStreamRoster:
    return await JetStreamRoster.connect(url, bucket=f"R_{isolation}")


async def test_appends_get_increasing_revisions_and_replay_returns_the_full_log(
    nats_url: str, isolation: str
) -> None:
    roster = await _roster(nats_url, isolation)
    try:
        assert await roster.replay() == []
        a = await roster.append("spiffe://grid.local/agent/a", "registered", "t1")
        b = await roster.append("spiffe://grid.local/agent/a", "admitted", "t1")
        c = await roster.append("b", "registered", None)
    finally:
        await roster.close()
    assert a.revision < b.revision < c.revision
    again = await _roster(nats_url, isolation)
    try:
        assert await again.replay() == [a, b, c]
    finally:
        await again.close()


async def test_tail_delivers_new_entries_within_a_second(nats_url: str, isolation: str) -> None:
    roster = await _roster(nats_url, isolation)
    writer = await _roster(nats_url, isolation)
    seen: asyncio.Queue[RosterEntry] = asyncio.Queue()

    async def follow(after: int) -> None:
        async for entry in roster.tail(after):
            await seen.put(entry)

    try:
        old = await writer.append("old", "registered", "t")
        task = asyncio.create_task(follow(old.revision))
        try:
            for i in range(3):
                appended = await writer.append(f"agent-{i}", "admitted", "t")
                got = await asyncio.wait_for(seen.get(), timeout=1.0)
                assert got == appended
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    finally:
        await writer.close()
        await roster.close()


async def test_roster_survives_a_server_restart(
    nats_server: NatsServer, nats_url: str, isolation: str
) -> None:
    roster = await _roster(nats_url, isolation)
    try:
        entry = await roster.append("keeper", "admitted", "t")
    finally:
        await roster.close()
    nats_server.restart()
    again = await _roster(nats_server.url, isolation)
    try:
        assert await again.replay() == [entry]
    finally:
        await again.close()


async def test_tail_resumes_after_a_server_restart(
    nats_server: NatsServer, nats_url: str, isolation: str
) -> None:
    roster = await _roster(nats_url, isolation)
    seen: asyncio.Queue[RosterEntry] = asyncio.Queue()

    async def follow() -> None:
        async for entry in roster.tail(0):
            await seen.put(entry)

    task = asyncio.create_task(follow())
    try:
        first = await roster.append("a", "registered", "t")
        assert await asyncio.wait_for(seen.get(), timeout=1.0) == first
        nats_server.restart()
        writer = await _roster(nats_server.url, isolation)
        try:
            second = await writer.append("a", "admitted", "t")
        finally:
            await writer.close()
        assert await asyncio.wait_for(seen.get(), timeout=8.0) == second
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await roster.close()
