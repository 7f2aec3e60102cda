"""TCP push-pull framing on real sockets: round trips, bounds, and bad frames dropped."""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import AsyncIterator

import pytest

from grid.adapters.pushpull import PushPullServer, PushPullSettings, exchange
from grid.adapters.udp import TransportCounters, format_address
from grid.core.crdt.payload import encode_lane
from grid.core.crdt.record import ProviderRecord
from grid.core.crdt.snapshot import GridStateSnapshot
from grid.core.swim.messages import Alive, BroadcastItem, Dead, Lane, PushPull
from grid.core.wire import codec
from grid.core.wire.codec import prefix_length
from grid.core.wire.frame import seal
from grid.core.wire.keyring import Keyring
from grid.testing.poll import eventually

KEY = bytes(range(32))
WRONG_KEY = bytes(range(1, 33))

OURS = PushPull(
    "server",
    (Alive("server", "127.0.0.1:1", 4), Dead("gone", "127.0.0.1:2", 1, "gone")),
    (BroadcastItem(Lane.METADATA, "server", 2, b"meta"),),
)


class Recorder:
    """A responder that records what it was pushed and answers with `OURS`."""

    def __init__(self) -> None:
        self.received: list[PushPull] = []

    async def __call__(self, remote: PushPull) -> PushPull:
        self.received.append(remote)
        return OURS


SETTINGS = PushPullSettings(timeout_s=0.5)


@pytest.fixture
async def server() -> AsyncIterator[tuple[PushPullServer, Recorder]]:
    recorder = Recorder()
    srv = PushPullServer(Keyring(KEY), TransportCounters(), recorder, SETTINGS)
    await srv.start("127.0.0.1", 0)
    yield srv, recorder
    await srv.close()


def _address(srv: PushPullServer) -> str:
    return format_address("127.0.0.1", srv.port)


async def test_exchange_pushes_ours_and_pulls_theirs(
    server: tuple[PushPullServer, Recorder],
) -> None:
    srv, recorder = server
    counters = TransportCounters()
    mine = PushPull("client", (Alive("client", "127.0.0.1:3", 0),), (), join=True)
    reply = await exchange(_address(srv), mine, Keyring(KEY), counters, SETTINGS)
    assert reply == OURS
    assert recorder.received == [mine]
    assert counters.push_pulls_completed == 1
    assert counters.stream_bytes_sent == srv.counters.stream_bytes_received
    assert counters.stream_bytes_received == srv.counters.stream_bytes_sent
    assert srv.counters.push_pulls_served == 1


async def test_a_state_lane_with_2000_providers_crosses_the_stream(
    server: tuple[PushPullServer, Recorder],
) -> None:
    srv, recorder = server
    snapshot = GridStateSnapshot.empty("client")
    for i in range(2000):
        record = ProviderRecord(f"p-{i}", f"c-{i}", "client", "local", ("m",), True, 1.0)
        snapshot = snapshot.put_provider(f"p-{i}", record)
    payload = encode_lane(snapshot.state)
    assert len(payload) > 90 * 1400  # far beyond one datagram
    item = BroadcastItem(Lane.STATE, "client", snapshot.revision(Lane.STATE), payload)
    mine = PushPull("client", (), (item,))
    reply = await exchange(_address(srv), mine, Keyring(KEY), TransportCounters(), SETTINGS)
    assert reply == OURS
    assert recorder.received[0].items == (item,)


async def _send_raw(srv: PushPullServer, data: bytes, *, close: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(data)
    await writer.drain()
    if close:
        writer.write_eof()
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    return answer


async def test_bad_frames_are_dropped_and_counted_and_the_server_keeps_serving(
    server: tuple[PushPullServer, Recorder],
) -> None:
    srv, recorder = server
    body = seal(KEY, codec.encode_stream(OURS))
    length = struct.pack(">I", len(body))
    cases = {
        "oversize": struct.pack(">I", SETTINGS.frame_bytes_max + 1) + body,
        "too_short": struct.pack(">I", 10) + b"GRID\x01" + bytes(5),
        "truncated": length + body[: len(body) // 2],
        "bad_magic": length + b"XXXX" + body[4:],
        "unknown_version": length + b"GRID\x07" + body[5:],
        "auth_failed": prefix_length(Keyring(WRONG_KEY).seal(codec.encode_stream(OURS))),
        "malformed": prefix_length(Keyring(KEY).seal(os.urandom(64))),
    }
    for data in cases.values():
        assert await _send_raw(srv, data) == b""
    await _send_raw(srv, length[:2])  # closed inside the length prefix
    dropped = srv.counters.streams_dropped
    await eventually(
        lambda: sum(dropped.values()) == len(cases) + 1, "sum(dropped.values()) == len(cases) + 1"
    )
    assert {reason: dropped[reason] for reason in cases} == {
        **dict.fromkeys(cases, 1),
        "truncated": 2,
    }
    assert recorder.received == []
    reply = await exchange(_address(srv), OURS, Keyring(KEY), TransportCounters(), SETTINGS)
    assert reply == OURS


async def test_a_silent_peer_times_out_and_frees_its_slot(
    server: tuple[PushPullServer, Recorder],
) -> None:
    srv, _ = server
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(b"\x00\x00")
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    await writer.wait_closed()
    assert srv.counters.streams_dropped["timeout"] == 1


async def test_connections_beyond_the_limit_are_refused_as_busy() -> None:
    settings = PushPullSettings(timeout_s=2.0, connections_max=1)
    srv = PushPullServer(Keyring(KEY), TransportCounters(), Recorder(), settings)
    await srv.start("127.0.0.1", 0)
    try:
        _, holder = await asyncio.open_connection("127.0.0.1", srv.port)
        await eventually(lambda: srv._active == 1, "srv._active == 1")
        reader, extra = await asyncio.open_connection("127.0.0.1", srv.port)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert srv.counters.streams_dropped["busy"] == 1
        for writer in (holder, extra):
            writer.close()
            await writer.wait_closed()
    finally:
        await srv.close()


async def test_exchange_with_a_wrong_key_or_a_closed_port_fails_quietly(
    server: tuple[PushPullServer, Recorder],
) -> None:
    srv, recorder = server
    counters = TransportCounters()
    assert await exchange(_address(srv), OURS, Keyring(WRONG_KEY), counters, SETTINGS) is None
    await eventually(
        lambda: srv.counters.streams_dropped["auth_failed"] == 1,
        "srv.counters.streams_dropped['auth_failed'] == 1",
    )
    assert recorder.received == []
    assert counters.streams_dropped["truncated"] == 1  # the server hung up
    closed = PushPullServer(Keyring(KEY), TransportCounters(), Recorder(), SETTINGS)
    await closed.start("127.0.0.1", 0)
    port = closed.port
    await closed.close()
    address = format_address("127.0.0.1", port)
    assert await exchange(address, OURS, Keyring(KEY), counters, SETTINGS) is None
    assert counters.push_pulls_failed == 2


async def test_a_garbage_reply_is_dropped_by_the_client() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4)
        writer.write(struct.pack(">I", 2**31) + b"junk")
        await writer.drain()
        writer.close()

    srv = await asyncio.start_server(garbage, "127.0.0.1", 0)
    try:
        port = srv.sockets[0].getsockname()[1]
        counters = TransportCounters()
        address = format_address("127.0.0.1", port)
        assert await exchange(address, OURS, Keyring(KEY), counters, SETTINGS) is None
        assert counters.streams_dropped["oversize"] == 1
    finally:
        srv.close()
        await srv.wait_closed()
