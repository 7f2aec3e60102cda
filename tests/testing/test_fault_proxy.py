"""The fault proxy: the pure decision core (laws) and the asyncio adapter on loopback."""

from __future__ import annotations

import asyncio
import os
import random
import socket
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.demo.ports import PortPicker
from grid.testing.fault_proxy import HOST, FaultCore, FaultProxy
from grid.testing.poll import eventually
from grid.testing.proc_sockets import tcp_owner

SITES = ["a", "b", "c"]


@given(st.integers(0, 2**32), st.sampled_from(SITES))
def test_a_partition_cuts_both_directions_and_nothing_else(seed: int, isolated: str) -> None:
    core = FaultCore(random.Random(seed))
    core.partition(isolated, SITES)
    for src in SITES:
        for dst in SITES:
            cut = src != dst and isolated in (src, dst)
            assert core.deliver(src, dst) is not cut
            assert core.admit(src, dst) is not cut
    core.heal()
    assert all(core.deliver(s, d) for s in SITES for d in SITES)


@given(st.integers(0, 2**32), st.floats(0.0, 1.0))
def test_loss_replays_from_the_seed_and_spares_connections(seed: int, loss: float) -> None:
    runs = []
    for _ in range(2):
        core = FaultCore(random.Random(seed))
        core.set_loss(loss)
        runs.append([core.deliver("a", "b") for _ in range(200)])
        assert core.admit("a", "b")
    assert runs[0] == runs[1]
    assert sum(not d for d in runs[0]) == runs[0].count(False)
    if loss == 0.0:
        assert all(runs[0])
    if loss == 1.0:
        assert not any(runs[0])


def test_loss_is_near_its_probability_and_unknown_sources_never_pass() -> None:
    core = FaultCore(random.Random(25))
    core.set_loss(0.5)
    delivered = sum(core.deliver("a", "b") for _ in range(10_000))
    assert 4_700 < delivered < 5_300
    assert not core.deliver(None, "b")
    assert core.counters.unknown_source == 1
    with pytest.raises(ValueError):
        core.set_loss(1.5)


class _Recorder(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.got: list[tuple[bytes, int]] = []
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.got.append((data, addr[1]))


async def test_datagrams_cross_like_a_nat_and_a_partition_drops_them() -> None:
    loop = asyncio.get_running_loop()
    pick = PortPicker(random.Random())
    real = {s: pick() for s in SITES}
    listen = {s: pick() for s in SITES}
    ends = {}
    for site in SITES:
        _, ends[site] = await loop.create_datagram_endpoint(
            _Recorder, local_addr=(HOST, real[site])
        )
    proxy = await FaultProxy(FaultCore(random.Random(1)), real, listen, lambda *_: None).start()
    try:
        ends["a"].transport.sendto(b"hello", (HOST, listen["b"]))
        await eventually(lambda: ends["b"].got, "b receives a's datagram")
        assert ends["b"].got == [(b"hello", listen["a"])]  # from a's advertised port
        proxy.partition("a")
        ends["a"].transport.sendto(b"cut", (HOST, listen["b"]))
        ends["c"].transport.sendto(b"fine", (HOST, listen["b"]))
        await eventually(lambda: len(ends["b"].got) == 2, "b receives c's datagram")
        assert ends["b"].got[1] == (b"fine", listen["c"])
        assert proxy.core.counters.partitioned == 1
    finally:
        await proxy.stop()
        for end in ends.values():
            end.transport.close()


async def test_connections_are_piped_by_origin_and_cut_by_a_partition() -> None:
    pick = PortPicker(random.Random())
    real = {s: pick() for s in SITES}
    listen = {s: pick() for s in SITES}

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, HOST, real["b"])
    origins = {"a": pick()}
    proxy = FaultProxy(
        FaultCore(random.Random(1)),
        real,
        listen,
        lambda port, _: next((s for s, p in origins.items() if p == port), None),
    )
    await proxy.start()
    try:
        reader, writer = await asyncio.open_connection(
            HOST, listen["b"], local_addr=(HOST, origins["a"])
        )
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        proxy.partition("a")
        assert await reader.read() == b""  # the open connection was cut
        assert proxy.core.counters.cut_connections == 1
        writer.close()
        stranger_reader, stranger = await asyncio.open_connection(HOST, listen["b"])
        assert await stranger_reader.read() == b""  # an unknown origin is refused
        stranger.close()
        assert proxy.core.counters.refused_connections == 1
    finally:
        await proxy.stop()
        server.close()
        await server.wait_closed()


async def test_tcp_owner_names_the_process_behind_a_source_port() -> None:
    with socket.create_server((HOST, 0)) as listener:
        port = listener.getsockname()[1]
        with socket.create_connection((HOST, port)) as client:
            source = client.getsockname()[1]
            assert tcp_owner(source, port, [os.getpid()]) == os.getpid()
            assert tcp_owner(source, port, [1]) is None
            assert tcp_owner(source, port + 1, [os.getpid()]) is None
