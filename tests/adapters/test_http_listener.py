"""The listener policy on real loopback sockets: deadlines, caps, classes, refusals."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from grid.adapters.http_listener import HttpListener, ListenerPolicy
from grid.testing.poll import eventually

Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter


def _app() -> web.Application:
    async def hello(_request: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def refuse(_request: web.Request) -> web.Response:
        return web.Response(status=403, text="no")  # the body is left unread

    app = web.Application()
    app.router.add_get("/", hello)
    app.router.add_post("/refuse", refuse)
    return app


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Any]]:
    started: list[HttpListener] = []

    async def start(**policy: Any) -> tuple[HttpListener, int]:
        listener = HttpListener(_app(), ListenerPolicy(**policy))
        _, port = await listener.start("127.0.0.1", 0)
        started.append(listener)
        return listener, port

    yield start
    for listener in started:
        await listener.stop()


async def _closed_within(reader: Reader, limit_s: float) -> float:
    begun = time.monotonic()
    with contextlib.suppress(ConnectionError):
        while await asyncio.wait_for(reader.read(65536), limit_s):
            pass
    return time.monotonic() - begun


async def _close(writer: Writer) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.wait_closed()


async def _get(port: int) -> int:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/") as r:
        return r.status


async def test_port_zero_binds_and_a_taken_port_raises(serve: Any) -> None:
    _, port = await serve()
    assert await _get(port) == 200
    with pytest.raises(OSError):
        await HttpListener(_app()).start("127.0.0.1", port)
    assert await _get(port) == 200


async def test_a_partial_head_is_closed_at_the_header_deadline(serve: Any) -> None:
    _, port = await serve(header_read_timeout_s=0.3, idle_timeout_s=30)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x")
    assert 0.2 <= await _closed_within(reader, 5) <= 2.0
    await _close(writer)


async def test_a_kept_alive_connection_is_closed_after_the_idle_timeout(serve: Any) -> None:
    _, port = await serve(header_read_timeout_s=30, idle_timeout_s=0.3)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    await reader.readuntil(b"hello")
    assert await _closed_within(reader, 5) <= 2.0
    await _close(writer)


async def test_a_refused_large_body_closes_and_a_small_one_keeps_the_connection(
    serve: Any,
) -> None:
    _, port = await serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    small = b"POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789"
    writer.write(small + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    answers = await reader.readuntil(b"hello")
    assert answers.startswith(b"HTTP/1.1 403") and b"HTTP/1.1 200" in answers
    writer.write(b"POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
    assert (await reader.readline()).startswith(b"HTTP/1.1 403")
    assert await _closed_within(reader, 5) <= 1.0
    await _close(writer)


async def test_a_full_listener_refuses_at_accept(serve: Any) -> None:
    listener, port = await serve(connections_max=2)
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    await eventually(lambda: listener.connections.total == 2, "two connections open")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await _closed_within(reader, 5) <= 1.0
    await _close(writer)
    assert listener.connections.refused == 1
    for _, held_writer in held:
        await _close(held_writer)


async def test_a_full_listener_can_evict_the_oldest_connection_without_a_head(
    serve: Any,
) -> None:
    listener, port = await serve(connections_max=2, evict_unsettled=True, evictable_after_s=0)
    silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    await eventually(lambda: listener.connections.total == 2, "two connections open")
    assert await _get(port) == 200  # the probe gets in at once
    assert listener.connections.evicted == 1
    assert await _closed_within(silent[0][0], 5) <= 1.0
    for _, writer in silent:
        await _close(writer)


async def test_a_classified_connection_is_bounded_by_its_class(serve: Any) -> None:
    listener, port = await serve(class_limits={"peer": 1}, classify=lambda _t: "peer")
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    await eventually(lambda: listener.connections.held("peer") == 1, "one peer open")
    extra_reader, extra_writer = await asyncio.open_connection("127.0.0.1", port)
    assert await _closed_within(extra_reader, 5) <= 1.0
    await _close(extra_writer)
    await _close(writer)
    await eventually(lambda: listener.connections.held("peer") == 0, "no peer open")
    assert await _get(port) == 200
