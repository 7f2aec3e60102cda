"""Issue 26.3, 26.4, 26.7: slow bodies, clients that never read, idle floods (scaled down)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import replace
from pathlib import Path

import aiohttp
from aiohttp import web

from grid.gateway.descriptors import connection_cap
from grid.gateway.settings import LISTENER_POLICY
from grid.testing.edge_rig import chat, edge_rig
from grid.testing.poll import eventually


async def _honest(public: str, timeout_s: float = 10.0) -> int:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http,
        http.post(f"http://{public}/v1/chat/completions", json=chat()) as resp,
    ):
        await resp.read()
        return resp.status


async def _slow_body(port: int, sent: int, stop: asyncio.Event) -> bytes:
    """Declare 4 MiB, send ``sent`` bytes, then a byte every 0.5 s; the answer (b"" if cut)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
        f"Content-Length: {4 * 1024 * 1024}\r\n\r\n"
    )
    writer.write(head.encode() + b" " * sent)
    answer = asyncio.ensure_future(reader.read(4096))
    try:
        while not answer.done() and not stop.is_set():
            await asyncio.wait([answer], timeout=0.5)
            if not answer.done():
                writer.write(b" ")
        return await answer if answer.done() else b"still open"
    except ConnectionError:
        return b""
    finally:
        answer.cancel()
        writer.close()


async def test_slow_bodies_are_refused_408_in_time(tmp_path: Path) -> None:
    pace = {"body_grace_s": 0.5, "body_min_rate_bytes_s": 64 * 1024, "body_timeout_s": 20.0}
    async with edge_rig(tmp_path, **pace) as rig:
        stop = asyncio.Event()
        started = time.monotonic()
        # 20 connections, 256 KiB sent then a trickle: due at 0.5 s + 256 KiB / 64 KiB/s = 4.5 s.
        answers = asyncio.gather(*(_slow_body(rig.port, 256 * 1024, stop) for _ in range(20)))
        try:
            results = await asyncio.wait_for(answers, 15.0)
        finally:
            stop.set()
        elapsed = time.monotonic() - started
        assert await _honest(rig.public) == 200
    assert elapsed < 12.0
    for result in results:
        assert result.startswith(b"HTTP/1.1 408"), result[:80]
        assert json.loads(result.partition(b"\r\n\r\n")[2])["error"]["code"] == "body_timeout"
    assert rig.provider.seen == [rig.provider.seen[0]]  # only the honest request


async def endless(request: web.Request) -> web.StreamResponse:
    out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await out.prepare(request)
    chunk = b"data: " + b"z" * 65536 + b"\n\n"
    try:
        while True:
            await out.write(chunk)
    except ConnectionError:
        return out


def _non_reader(port: int) -> socket.socket:
    """A client that asks for a stream and never reads a byte of it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    body = json.dumps(chat(stream=True)).encode()
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return sock


async def test_clients_that_never_read_release_the_clusters_pool(tmp_path: Path) -> None:
    # Three waves of four stalled streams, each cut 1 s after its writes stall: the wait
    # for a pooled connection is bounded well past that, as a loaded machine needs,
    # and a pool the stalled clients kept would still fail every honest request.
    limits = {"upstream_connections_max": 4, "write_timeout_s": 1.0, "pool_acquire_timeout_s": 15.0}

    async def answer(request: web.Request) -> web.StreamResponse:
        if json.loads(await request.read()).get("stream"):
            return await endless(request)
        return web.json_response({"usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    async with edge_rig(tmp_path, answer, **limits) as rig:
        stalled = [_non_reader(rig.port) for _ in range(12)]  # 3x the pool
        try:
            await asyncio.sleep(0)
            statuses = [await _honest(rig.public, 20.0) for _ in range(5)]
            broken = rig.gateway.metrics.requests["stream_broken"].value
        finally:
            for sock in stalled:
                sock.close()
    assert statuses == [200] * 5
    assert broken >= 4


async def test_an_idle_flood_past_the_cap_leaves_honest_requests_served(tmp_path: Path) -> None:
    listener = replace(LISTENER_POLICY, connections_max=40, evictable_after_s=0.0)
    async with edge_rig(tmp_path, listener=listener) as rig:
        idle = []
        for _ in range(60):  # 1.5x the cap, as 1,100 is past 1,024
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", rig.port))
            idle.append(sock)
        try:
            connections = rig.gateway.public.connections
            await eventually(lambda: connections.total >= 40, "the idle flood filled the cap")
            statuses = [await _honest(rig.public) for _ in range(14)]
        finally:
            for sock in idle:
                sock.close()
        assert rig.gateway.public.connections.evicted > 0
    assert statuses == [200] * 14


def test_the_cap_stays_below_the_descriptor_limit() -> None:
    assert connection_cap(1024, 1024) == 480
    assert connection_cap(1024, 1_048_576) == 1024
    assert connection_cap(1024, 40) == 16
