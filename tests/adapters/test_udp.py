"""The SWIM datagram edge on a real UDP socket: sealing, decoding, drops and the timer heap."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Iterator

import pytest

from grid.adapters.timers import TimerHeap
from grid.adapters.udp import (
    DatagramEndpoint,
    TransportCounters,
    format_address,
    open_endpoint,
    parse_address,
    resolve_address,
)
from grid.core.swim.messages import (
    Ack,
    Alive,
    Datagram,
    Dead,
    Ping,
    PingReq,
)
from grid.core.wire import codec
from grid.core.wire.frame import MAGIC, seal
from grid.core.wire.keyring import Keyring
from grid.errors import ValidationError
from grid.testing.poll import eventually

KEY = bytes(range(32))
WRONG_KEY = bytes(range(1, 33))
BURST = 150


class Inbox:
    """Collects what an endpoint hands over."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, Datagram]] = []

    def __call__(self, source: str, message: Datagram) -> None:
        self.messages.append((source, message))


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[DatagramEndpoint, Inbox]]:
    inbox = Inbox()
    ep = await open_endpoint("127.0.0.1", 0, Keyring(KEY), TransportCounters(), inbox)
    yield ep, inbox
    ep.close()


@pytest.fixture
def raw_socket() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    yield sock
    sock.close()


def _ping() -> Ping:
    return Ping(7, "site-a", "site-b", updates=(Alive("site-a", "127.0.0.1:1", 3),))


async def test_sealed_datagram_is_decoded_and_handed_over(
    endpoint: tuple[DatagramEndpoint, Inbox], raw_socket: socket.socket
) -> None:
    ep, inbox = endpoint
    packet = seal(KEY, codec.encode_datagram(_ping()))
    raw_socket.sendto(packet, ep.local_address)
    await eventually(lambda: len(inbox.messages) == 1, "len(inbox.messages) == 1")
    source, message = inbox.messages[0]
    assert message == _ping()
    assert parse_address(source) == raw_socket.getsockname()
    assert ep.counters.datagrams_received == 1
    assert ep.counters.datagram_bytes_received == len(packet)


async def test_bad_datagrams_are_dropped_and_counted_by_reason(
    endpoint: tuple[DatagramEndpoint, Inbox], raw_socket: socket.socket
) -> None:
    ep, inbox = endpoint
    valid = seal(KEY, codec.encode_datagram(_ping()))
    bad = {
        "too_short": [b"", b"GRID\x01", valid[:32]],
        "bad_magic": [b"XRID" + valid[4:], os.urandom(200)],
        "unknown_version": [MAGIC + b"\x02" + valid[5:]],
        "auth_failed": [
            seal(WRONG_KEY, codec.encode_datagram(_ping())),
            valid[:-1] + bytes([valid[-1] ^ 1]),
            valid[:40] + bytes([valid[40] ^ 0x80]) + valid[41:],
        ],
        "malformed": [seal(KEY, b"\xff\xff\xff\xff"), seal(KEY, b"")],
        "oversize": [seal(KEY, os.urandom(1401))],
    }
    for packets in bad.values():
        for packet in packets:
            raw_socket.sendto(packet, ep.local_address)
    raw_socket.sendto(valid, ep.local_address)  # the node still works afterwards
    await eventually(lambda: len(inbox.messages) == 1, "len(inbox.messages) == 1")
    expected = {reason: len(packets) for reason, packets in bad.items()}
    await eventually(
        lambda: all(ep.counters.datagrams_dropped[r] == n for r, n in expected.items()),
        "all(ep.counters.datagrams_dropped[r] == n for r, n in expected.items())",
    )
    assert inbox.messages[0][1] == _ping()
    assert sum(ep.counters.datagrams_dropped.values()) == sum(expected.values())


async def test_send_seals_with_the_primary_key_and_the_peer_decodes() -> None:
    inbox = Inbox()
    old = bytes(32)
    receiver = await open_endpoint("127.0.0.1", 0, Keyring(old, [KEY]), TransportCounters(), inbox)
    sender = await open_endpoint("127.0.0.1", 0, Keyring(KEY, [old]), TransportCounters(), Inbox())
    try:
        message = PingReq(9, "site-a", "site-c", "127.0.0.1:9", updates=(Dead("x", "h:1", 2, "x"),))
        sender.send(format_address(*receiver.local_address), message)
        await eventually(lambda: len(inbox.messages) == 1, "len(inbox.messages) == 1")
        assert inbox.messages[0][1] == message
        assert sender.counters.datagrams_sent == 1
        assert sender.counters.datagram_bytes_sent == receiver.counters.datagram_bytes_received
    finally:
        sender.close()
        receiver.close()


async def test_an_overfull_datagram_is_trimmed_to_the_budget(
    endpoint: tuple[DatagramEndpoint, Inbox],
) -> None:
    ep, inbox = endpoint
    updates = tuple(Alive(f"member-{i:03d}", f"10.0.0.{i}:7946", i) for i in range(60))
    message = Ack(1, "site-a", updates=updates)
    assert len(codec.encode_datagram(message, codec.CodecLimits(datagram_bytes_max=10**6))) > 1400
    ep.send(format_address(*ep.local_address), message)
    await eventually(lambda: len(inbox.messages) == 1, "len(inbox.messages) == 1")
    got = inbox.messages[0][1]
    assert 0 < len(got.updates) < len(updates)
    assert got.updates == updates[: len(got.updates)]
    assert ep.counters.datagrams_trimmed == 1
    assert ep.counters.datagram_bytes_received <= 1400 + 33


def test_addresses_format_and_parse() -> None:
    assert format_address("127.0.0.1", 7946) == "127.0.0.1:7946"
    assert format_address("::1", 7946) == "[::1]:7946"
    assert parse_address("[::1]:7946") == ("::1", 7946)
    assert parse_address("site.example:1") == ("site.example", 1)
    for bad in ("nohost", ":7946", "h:", "h:x", "h:70000"):
        with pytest.raises(ValidationError):
            parse_address(bad)


async def test_names_resolve_once_to_ip_literals() -> None:
    assert await resolve_address("localhost:7946") in ("127.0.0.1:7946", "[::1]:7946")
    assert await resolve_address("127.0.0.1:1") == "127.0.0.1:1"


async def test_timer_heap_fires_due_timers_in_order_through_one_handle() -> None:
    loop = asyncio.get_running_loop()
    woke = asyncio.Event()
    heap: TimerHeap[str] = TimerHeap(loop, woke.set)
    now = loop.time()
    heap.schedule("second", now + 0.04)
    heap.schedule("first", now + 0.02)
    heap.schedule("last", now + 10)
    assert heap.pop_due(now) == []
    await asyncio.wait_for(woke.wait(), 2)
    assert loop.time() >= now + 0.02
    woke.clear()
    assert heap.pop_due(now + 0.03) == ["first"]
    heap.rearm()
    await asyncio.wait_for(woke.wait(), 2)
    assert loop.time() >= now + 0.04
    assert heap.pop_due(now + 0.05) == ["second"]
    assert len(heap) == 1
    heap.close()
    assert len(heap) == 0


async def test_a_burst_that_arrives_while_the_loop_is_busy_is_all_received(
    endpoint: tuple[DatagramEndpoint, Inbox], raw_socket: socket.socket
) -> None:
    """A burst of 150 full datagrams (twice the flood's 79) lands while the loop is busy.

    The kernel's default receive buffer (about 208 KiB) holds 92 of them; the rest
    were dropped before the node read any.
    """
    ep, inbox = endpoint
    fakes = [Alive(f"fake-{i:04d}", "127.0.0.1:9", 0) for i in range(BURST * 38)]
    packets = [
        seal(KEY, codec.encode_datagram(Ping(i, "mallory", updates=tuple(fakes[i : i + 38]))))
        for i in range(0, len(fakes), 38)
    ]
    assert all(len(packet) > 1100 for packet in packets)
    target = ep.local_address
    for packet in packets:  # no await: the loop reads nothing meanwhile
        raw_socket.sendto(packet, target)
    await eventually(lambda: len(inbox.messages) == len(packets), "the whole burst is read")
    assert ep.counters.datagrams_received == len(packets)
