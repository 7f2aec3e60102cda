"""The gateway's listener limits on real sockets: header deadline, connection cap, idle close."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from grid.gateway.listener import Listener
from grid.gateway.settings import ListenerLimits
from grid.testing.poll import eventually


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    app = web.Application()
    app.router.add_get("/", _ok)
    limits = ListenerLimits(header_read_timeout_s=0.3, idle_timeout_s=0.6, connections_max=2)
    served = Listener(app, limits, shutdown_s=1.0)
    await served.start("127.0.0.1", 0)
    yield served
    await served.stop()


async def _open(listener: Listener) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = listener.address.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def test_a_trickled_head_is_cut_at_the_header_deadline(listener: Listener) -> None:
    reader, writer = await _open(listener)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
    await writer.drain()
    async with asyncio.timeout(5):
        assert await reader.read() == b""  # closed without an answer
    assert listener.gate.header_timeouts == 1
    writer.close()


async def test_a_complete_head_is_answered_and_an_idle_connection_closed_later(
    listener: Listener,
) -> None:
    reader, writer = await _open(listener)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    await reader.readexactly(2)
    async with asyncio.timeout(5):
        assert await reader.read() == b""  # the idle keep-alive timeout closed it
    assert listener.gate.header_timeouts == 0
    writer.close()


async def test_connections_beyond_the_cap_are_closed_unread(listener: Listener) -> None:
    held = [await _open(listener) for _ in range(2)]
    await eventually(lambda: listener.gate.open == 2, "two connections admitted")
    reader, writer = await _open(listener)
    async with asyncio.timeout(5):
        assert await reader.read() == b""
    assert listener.gate.refused == 1
    for _r, w in [*held, (reader, writer)]:
        w.close()
    await eventually(lambda: listener.gate.open == 0, "slots returned")
