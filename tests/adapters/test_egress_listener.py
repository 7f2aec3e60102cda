"""The embedded egress: real mTLS probes on loopback, and the bounds a client meets."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from grid.adapters.egress_listener import EgressListener
from grid.adapters.tls_probe import client_context, probe, server_context
from grid.adapters.tls_sessions import TlsSessions
from grid.demo.pki import DevPki, write_dev_pki
from grid.testing.poll import eventually

NAME = "localhost"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> DevPki:
    return write_dev_pki(tmp_path_factory.mktemp("egress-pki"), ["east", "west"])


async def _listening(pki: DevPki, **bounds: Any) -> tuple[EgressListener, str]:
    west = pki.sites["west"]
    listener = EgressListener(server_context(pki.ca, west.cert, west.key), **bounds)
    host, port = await listener.start("127.0.0.1", 0)
    return listener, f"{host}:{port}"


@pytest.fixture
async def egress(pki: DevPki) -> AsyncIterator[tuple[EgressListener, str]]:
    listener, address = await _listening(pki)
    yield listener, address
    await listener.stop()


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the listener has closed (or reset) the connection of ``reader``."""
    with contextlib.suppress(ConnectionError):
        return await reader.read(65536) == b""
    return True


async def test_a_probe_verifies_the_certificate_and_the_next_one_resumes(
    pki: DevPki, egress: tuple[EgressListener, str]
) -> None:
    listener, address = egress
    east = pki.sites["east"]
    ctx, sessions = client_context(pki.ca, east.cert, east.key), TlsSessions()
    pins = {pki.sites["west"].fingerprint}
    first = await probe(address, ctx, NAME, 3.0, sessions, pins)
    assert first.reachable and not first.resumed and first.fingerprint in pins
    for _ in range(3):
        again = await probe(address, ctx, NAME, 3.0, sessions, pins)
        assert again.reachable and again.resumed and again.fingerprint in pins
    await eventually(lambda: not listener.open, "every probe's connection closed")


async def test_a_client_without_a_grid_certificate_is_refused(
    pki: DevPki, egress: tuple[EgressListener, str], tmp_path: Path
) -> None:
    listener, address = egress
    other = write_dev_pki(tmp_path / "other", ["east"])  # another CA: an untrusted client
    ctx = client_context(pki.ca, other.sites["east"].cert, other.sites["east"].key)
    host, port = address.rsplit(":", 1)
    with pytest.raises(ssl.SSLError, match=r"UNKNOWN_CA|unknown ca"):
        # TLS 1.3: the client's handshake ends first, the server's alert comes after.
        reader, _ = await asyncio.open_connection(host, int(port), ssl=ctx, server_hostname=NAME)
        await reader.read(65536)
    await eventually(lambda: not listener.open, "the refused connection closed")


async def test_a_silent_client_is_cut_off_at_the_handshake_deadline(pki: DevPki) -> None:
    listener, address = await _listening(pki, handshake_timeout_s=0.2)
    try:
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        assert await asyncio.wait_for(_closed(reader), 5.0)
        await eventually(lambda: not listener.open, "the silent connection forgotten")
        writer.close()
    finally:
        await listener.stop()


async def test_connections_past_the_cap_are_aborted_at_accept(pki: DevPki) -> None:
    listener, address = await _listening(pki, connections_max=2)
    host, port = address.rsplit(":", 1)
    held = [await asyncio.open_connection(host, int(port)) for _ in range(2)]
    try:
        await eventually(lambda: len(listener.open) == 2, "two connections held")
        reader, writer = await asyncio.open_connection(host, int(port))
        assert await asyncio.wait_for(_closed(reader), 5.0)
        assert listener.refused == 1 and len(listener.open) == 2
        writer.close()
    finally:
        await listener.stop()
        for _, w in held:
            w.close()
    assert not listener.open


async def test_a_handshake_longer_than_the_bound_is_cut_off(pki: DevPki) -> None:
    listener, address = await _listening(pki, handshake_bytes_max=1024)
    try:
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        # A handshake record header announcing 16 KiB, then part of it: TLS waits for
        # the rest, so only the byte bound ends this before the 5 s deadline.
        writer.write(b"\x16\x03\x01\x40\x00" + b"\x01" * 2000)
        await writer.drain()
        assert await asyncio.wait_for(_closed(reader), 2.0)
        writer.close()
    finally:
        await listener.stop()
