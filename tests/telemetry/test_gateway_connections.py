"""Slow and idle clients over real sockets: header-read deadline and the connection cap."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from typing import Any

from grid.testing.poll import eventually

from .conftest import AGENT_IDS, Harness, admit, events

PARTIAL_HEAD = b"POST /v1/events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-"


async def _tls(harness: Harness) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    _, port = harness.host_port
    return await asyncio.open_connection(
        "127.0.0.1", port, ssl=harness.client_context("cn"), server_hostname="localhost"
    )


async def _closed_after(reader: asyncio.StreamReader, limit_s: float) -> float:
    """Seconds until the gateway closes the connection (EOF or reset), at most ``limit_s``."""
    started = time.monotonic()
    try:
        data = await asyncio.wait_for(reader.read(), limit_s)
    except (ConnectionResetError, BrokenPipeError):
        data = b""
    assert data == b"", data
    return time.monotonic() - started


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.wait_closed()


async def test_a_partial_request_head_is_closed_within_the_bound(start_gateway: Any) -> None:
    harness = await start_gateway(header_read_timeout_s=0.5)
    await admit(harness.roster, AGENT_IDS["cn"])
    reader, writer = await _tls(harness)
    try:
        writer.write(PARTIAL_HEAD)
        await writer.drain()
        elapsed = await _closed_after(reader, 5.0)
    finally:
        await _close(writer)
    assert 0.3 <= elapsed <= 2.0, elapsed
    status, _, _ = await harness.post("cn", "events", events(1).SerializeToString())
    assert status == 200


async def test_a_connection_that_sends_nothing_is_closed_within_the_bound(
    start_gateway: Any,
) -> None:
    harness = await start_gateway(header_read_timeout_s=0.5)
    reader, writer = await _tls(harness)
    try:
        assert await _closed_after(reader, 5.0) <= 2.0
    finally:
        await _close(writer)


async def test_a_stalled_tls_handshake_is_closed_within_the_bound(start_gateway: Any) -> None:
    harness = await start_gateway(header_read_timeout_s=0.5)
    _, port = harness.host_port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)  # no ClientHello
    try:
        assert await _closed_after(reader, 5.0) <= 2.0
    finally:
        await _close(writer)


async def test_a_kept_alive_connection_idle_past_the_bound_is_closed(start_gateway: Any) -> None:
    harness = await start_gateway(header_read_timeout_s=0.5, idle_timeout_s=0.5)
    await admit(harness.roster, AGENT_IDS["cn"])
    body = events(1).SerializeToString()
    head = (
        "POST /v1/events HTTP/1.1\r\nHost: localhost\r\n"
        f"Content-Type: application/x-protobuf\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    reader, writer = await _tls(harness)
    try:
        writer.write(head.encode() + body)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 5.0)
        assert status_line.startswith(b"HTTP/1.1 200"), status_line
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
        await eventually(
            lambda: harness.gateway.connections.total == 0,
            "harness.gateway.connections.total == 0",
            timeout_s=3.0,
        )
    finally:
        await _close(writer)


async def _refused_at_once(harness: Harness) -> None:
    """A connection past the cap is aborted before the TLS handshake completes."""
    started = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(_tls(harness), 5.0)
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    else:
        try:
            await _closed_after(reader, 5.0)
        finally:
            await _close(writer)
    assert time.monotonic() - started <= 2.0


async def test_idle_connections_never_pile_up_beyond_the_cap(start_gateway: Any) -> None:
    harness = await start_gateway(header_read_timeout_s=30, connections_max=3)
    await admit(harness.roster, AGENT_IDS["cn"])
    held = [await _tls(harness) for _ in range(3)]
    try:
        await eventually(
            lambda: harness.gateway.connections.total == 3, "harness.gateway.connections.total == 3"
        )
        for _ in range(3):
            await _refused_at_once(harness)
        assert harness.gateway.connections.total == 3
        assert harness.gateway.connections.refused == 3
        await _close(held[0][1])
        await eventually(
            lambda: harness.gateway.connections.total == 2, "harness.gateway.connections.total == 2"
        )
        status, _, _ = await harness.post("cn", "events", events(1).SerializeToString())
        assert status == 200
    finally:
        for _, writer in held[1:]:
            await _close(writer)


async def test_silent_tcp_connections_count_against_the_cap_from_accept(
    start_gateway: Any,
) -> None:
    harness = await start_gateway(header_read_timeout_s=30, connections_max=2)
    _, port = harness.host_port
    silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    try:
        await eventually(
            lambda: harness.gateway.connections.total == 2, "harness.gateway.connections.total == 2"
        )
        extra_reader, extra_writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            assert await _closed_after(extra_reader, 5.0) <= 2.0
        finally:
            await _close(extra_writer)
        assert harness.gateway.connections.total == 2
    finally:
        for _, writer in silent:
            await _close(writer)
    await eventually(
        lambda: harness.gateway.connections.total == 0, "harness.gateway.connections.total == 0"
    )


async def test_idle_connections_are_reaped_so_the_cap_frees_up(start_gateway: Any) -> None:
    harness = await start_gateway(header_read_timeout_s=0.5, connections_max=2)
    await admit(harness.roster, AGENT_IDS["cn"])
    held = [await _tls(harness) for _ in range(2)]
    try:
        await eventually(
            lambda: harness.gateway.connections.total == 0,
            "harness.gateway.connections.total == 0",
            timeout_s=3.0,
        )
        status, _, _ = await harness.post("cn", "events", events(1).SerializeToString())
        assert status == 200
    finally:
        for _, writer in held:
            await _close(writer)


async def test_a_failed_handshake_gives_its_slot_back(start_gateway: Any) -> None:
    harness = await start_gateway(header_read_timeout_s=5, connections_max=1)
    _, port = harness.host_port
    no_cert = ssl.create_default_context(cafile=str(harness.pki.ca))
    for _ in range(3):  # with one slot, a leaked slot would refuse the second attempt at once
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=no_cert, server_hostname="localhost"
            )
        except (ConnectionError, ssl.SSLError, OSError):
            pass
        else:
            with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
                await asyncio.wait_for(reader.read(), 5.0)
            await _close(writer)
        await eventually(
            lambda: harness.gateway.connections.total == 0, "harness.gateway.connections.total == 0"
        )
    assert harness.gateway.connections.refused == 0
