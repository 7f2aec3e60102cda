"""Egress probes resume TLS sessions: real mTLS servers on 127.0.0.1, handshakes counted.

The old probe made a full handshake per probe (both certificate chains sent,
verified and signed for); with `TlsSessions` only the first probe of a target,
and one every `FULL_HANDSHAKE_S`, is full, and the others resume its session.
Every probe is still a TCP connection and a handshake round trip.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import pytest

from grid.adapters.egress_listener import EgressListener
from grid.adapters.tls_probe import (
    ProbeOutcome,
    client_context,
    probe,
    server_context,
    session_key,
)
from grid.adapters.tls_sessions import TlsSessions
from grid.core.trust import fingerprint_der
from grid.testing.poll import eventually

from .conftest import SignalsPki


class CountingEgress:
    """An egress like `EgressListener` (handshake, then close) that counts accepts and
    how many handshakes resumed a session."""

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self.ctx = ctx
        self.accepted = 0
        self.full = 0
        self.resumed = 0
        self._server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> str:
        async def handle(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            obj = writer.get_extra_info("ssl_object")
            if obj.session_reused:
                self.resumed += 1
            else:
                self.full += 1
            writer.close()

        self._server = await asyncio.start_server(handle, "127.0.0.1", port, ssl=self.ctx)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def handled(self, count: int) -> tuple[int, int, int]:
        """Accepted, full and resumed, once ``count`` connections were handled (the
        server's side of a handshake can end after the client's)."""
        await eventually(lambda: self.accepted >= count, f"{count} connections handled")
        return self.accepted, self.full, self.resumed

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def egress(signals_pki: SignalsPki) -> AsyncIterator[tuple[CountingEgress, str]]:
    west = signals_pki.leaves["west"]
    server = CountingEgress(server_context(signals_pki.ca, west.cert, west.key))
    address = await server.start()
    yield server, address
    await server.stop()


def east_context(pki: SignalsPki) -> ssl.SSLContext:
    east = pki.leaves["east"]
    ctx = client_context(pki.ca, east.cert, east.key)
    ctx.check_hostname = False  # the dev leaves name their site, not 127.0.0.1
    return ctx


async def test_ten_probes_make_one_full_handshake_and_nine_resumed(
    signals_pki: SignalsPki, egress: tuple[CountingEgress, str]
) -> None:
    server, address = egress
    pin = fingerprint_der(signals_pki.leaves["west"].der)
    sessions, ctx = TlsSessions(), east_context(signals_pki)
    results = [await probe(address, ctx, sessions=sessions, pins=(pin,)) for _ in range(10)]
    assert all(r.reachable and r.fingerprint == pin for r in results)
    assert [r.resumed for r in results] == [False] + [True] * 9
    assert await server.handled(10) == (10, 1, 9)


async def test_without_sessions_every_probe_is_a_full_handshake(
    signals_pki: SignalsPki, egress: tuple[CountingEgress, str]
) -> None:
    server, address = egress
    ctx = east_context(signals_pki)
    for _ in range(3):
        assert (await probe(address, ctx)).outcome is ProbeOutcome.VERIFIED
    assert await server.handled(3) == (3, 3, 0)


async def test_a_leaf_outside_the_pins_is_never_resumed(
    signals_pki: SignalsPki, egress: tuple[CountingEgress, str]
) -> None:
    server, address = egress
    other = fingerprint_der(signals_pki.leaves["rogue"].der)
    sessions, ctx = TlsSessions(), east_context(signals_pki)
    for _ in range(3):
        result = await probe(address, ctx, sessions=sessions, pins=(other,))
        assert result.reachable and not result.resumed
    assert len(sessions) == 0
    assert await server.handled(3) == (3, 3, 0)


async def test_a_full_handshake_comes_again_once_the_session_is_old(
    signals_pki: SignalsPki, egress: tuple[CountingEgress, str]
) -> None:
    server, address = egress
    pin = fingerprint_der(signals_pki.leaves["west"].der)
    clock = Clock()
    sessions, ctx = TlsSessions(full_handshake_s=60.0, clock=clock), east_context(signals_pki)
    for _ in range(3):
        await probe(address, ctx, sessions=sessions, pins=(pin,))
        clock.now += 25.0  # resumed at +25 and +50, from the full handshake at 0
    assert await server.handled(3) == (3, 1, 2)
    clock.now += 10.0  # +85: older than 60 s since the full handshake, resumed or not
    assert not (await probe(address, ctx, sessions=sessions, pins=(pin,))).resumed
    assert await server.handled(4) == (4, 2, 2)


async def test_a_restarted_egress_that_refuses_the_session_still_passes(
    signals_pki: SignalsPki,
) -> None:
    west = signals_pki.leaves["west"]
    pin = fingerprint_der(west.der)
    first = CountingEgress(server_context(signals_pki.ca, west.cert, west.key))
    address = await first.start()
    sessions, ctx = TlsSessions(), east_context(signals_pki)
    assert (await probe(address, ctx, sessions=sessions, pins=(pin,))).reachable
    await first.stop()
    # Same port, a new server context: its ticket keys are new, the old ticket unknown.
    second = CountingEgress(server_context(signals_pki.ca, west.cert, west.key))
    await second.start(int(address.rsplit(":", 1)[1]))
    try:
        again = await probe(address, ctx, sessions=sessions, pins=(pin,))
        assert again.reachable and again.fingerprint == pin and not again.resumed
        assert await second.handled(1) == (1, 1, 0)
        assert (await probe(address, ctx, sessions=sessions, pins=(pin,))).resumed
    finally:
        await second.stop()


async def test_the_operators_egress_listener_is_resumed(signals_pki: SignalsPki) -> None:
    west = signals_pki.leaves["west"]
    pin = fingerprint_der(west.der)
    listener = EgressListener(server_context(signals_pki.ca, west.cert, west.key))
    host, port = await listener.start("127.0.0.1", 0)
    sessions, ctx = TlsSessions(), east_context(signals_pki)
    try:
        results = [
            await probe(f"{host}:{port}", ctx, sessions=sessions, pins=(pin,)) for _ in range(3)
        ]
    finally:
        await listener.stop()
    assert [r.resumed for r in results] == [False, True, True]
    assert all(r.fingerprint == pin for r in results)


async def test_a_failed_probe_drops_the_session(
    signals_pki: SignalsPki, egress: tuple[CountingEgress, str]
) -> None:
    server, address = egress
    pin = fingerprint_der(signals_pki.leaves["west"].der)
    sessions, ctx = TlsSessions(), east_context(signals_pki)
    await probe(address, ctx, sessions=sessions, pins=(pin,))
    assert len(sessions) == 1
    await server.stop()
    failed = await probe(address, ctx, sessions=sessions, pins=(pin,))
    assert failed.outcome is ProbeOutcome.CONNECTION_FAILED
    assert len(sessions) == 0


async def test_an_untrusted_egress_fails_as_before(signals_pki: SignalsPki) -> None:
    foreign = signals_pki.leaves["foreign"]
    server = CountingEgress(server_context(signals_pki.ca, foreign.cert, foreign.key))
    address = await server.start()
    try:
        result = await probe(address, east_context(signals_pki), sessions=TlsSessions())
    finally:
        await server.stop()
    assert result.outcome is ProbeOutcome.UNTRUSTED_ISSUER


async def test_a_resumed_leaf_no_longer_pinned_is_judged_by_a_full_handshake_at_once(
    signals_pki: SignalsPki,
) -> None:
    """A peer renews its certificate and its GridSite pins the new one: the resumed
    session still names the old leaf, so the same probe makes a full handshake."""
    west, rogue = signals_pki.leaves["west"], signals_pki.leaves["rogue"]
    ctx = server_context(signals_pki.ca, west.cert, west.key)
    server = CountingEgress(ctx)
    address = await server.start()
    sessions, client = TlsSessions(), east_context(signals_pki)
    try:
        assert await probe(address, client, sessions=sessions, pins=(fingerprint_der(west.der),))
        ctx.load_cert_chain(str(rogue.cert), str(rogue.key))  # same ticket keys, new leaf
        renewed = await probe(
            address, client, sessions=sessions, pins=(fingerprint_der(rogue.der),)
        )
        assert renewed.fingerprint == fingerprint_der(rogue.der) and not renewed.resumed
        assert await server.handled(3) == (3, 2, 1)  # full, resumed (old leaf), full
    finally:
        await server.stop()


async def test_every_probe_keeps_the_fresh_ticket_of_its_own_handshake(
    signals_pki: SignalsPki, egress: tuple[CountingEgress, str]
) -> None:
    """RFC 8446 C.4: a client should not offer a ticket twice, and a peer may hold them
    single-use; after a resumption the held session is the new ticket's."""
    server, address = egress
    sessions, client = TlsSessions(), east_context(signals_pki)
    pins = (fingerprint_der(signals_pki.leaves["west"].der),)
    held = []
    for _ in range(4):
        assert (await probe(address, client, sessions=sessions, pins=pins)).reachable
        session = sessions.offer(session_key(address, None))
        assert session is not None
        held.append(session.id)
    assert len(set(held)) == 4
    assert await server.handled(4) == (4, 1, 3)
