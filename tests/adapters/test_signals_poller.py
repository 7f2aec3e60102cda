"""The signals poller against a real mTLS signals server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from grid.adapters.signals_poller import KEEPALIVE_S, PollOutcome, SignalsPoller
from grid.adapters.signals_server import SignalsServer
from grid.adapters.tls_probe import client_context, server_context
from grid.core.routing.scoring import SignalValues
from grid.core.routing.signals import ProviderSignals, Published, SignalsFeed, SignalsScope
from grid.core.signals.connections import ListenerLimits
from grid.core.trust import TrustPolicy, fingerprint_der
from grid.core.vocabulary import BackendKind
from grid.testing.poll import eventually

from .conftest import SignalsPki

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def entry(site: str, queue: float, at: datetime = T0) -> ProviderSignals:
    return ProviderSignals(
        "p", "p", site, BackendKind.LOCAL, ("m",), True, at, SignalValues(queue_depth=queue)
    )


class OneFeed:
    def __init__(self, site: str) -> None:
        self.feed = SignalsFeed("net", site, 9, T0)

    def published(self, scope: SignalsScope) -> Published:
        return self.feed.current


def trust_of(pki: SignalsPki, local: str, peer: str) -> TrustPolicy:
    fp = {n: fingerprint_der(leaf.der) for n, leaf in pki.leaves.items()}
    return TrustPolicy.pin(fp[local], [fp[peer]])


class Peer:
    """West serving its signals; east polls it."""

    def __init__(
        self, pki: SignalsPki, served_as: str = "west", limits: ListenerLimits | None = None
    ) -> None:
        self.source = OneFeed(served_as)
        self.registry = CollectorRegistry()
        leaf = pki.leaves["west"]
        trust = trust_of(pki, "west", "east")
        self.server = SignalsServer(
            self.source,
            server_context(pki.ca, leaf.cert, leaf.key),
            lambda: trust,
            self.registry,
            limits,
        )

    def served(self) -> float | None:
        """Connections the server classified as a peer's: each one a TLS handshake."""
        return self.registry.get_sample_value("grid_signals_connections_total", {"class": "peer"})

    def open(self) -> float | None:
        return self.registry.get_sample_value("grid_signals_open_connections", {"class": "peer"})

    async def start(self) -> str:
        host, port = await self.server.start("127.0.0.1", 0)
        return f"{host}:{port}"


@pytest.fixture
async def poller(signals_pki: SignalsPki) -> AsyncIterator[SignalsPoller]:
    east = signals_pki.leaves["east"]
    trust = trust_of(signals_pki, "east", "west")
    p = SignalsPoller(
        client_context(signals_pki.ca, east.cert, east.key), lambda: trust, CollectorRegistry()
    )
    yield p
    await p.close()


async def test_polls_reuse_one_connection_and_send_the_etag(
    signals_pki: SignalsPki, poller: SignalsPoller
) -> None:
    peer = Peer(signals_pki)
    peer.source.feed.update([entry("west", 0.5)], T0)
    address = await peer.start()
    try:
        assert await poller.poll("west", address) is PollOutcome.OK
        assert await poller.poll("west", address) is PollOutcome.NOT_MODIFIED
        peer.source.feed.update([entry("west", 0.7)], T0 + timedelta(seconds=1))
        assert await poller.poll("west", address) is PollOutcome.OK
        doc = poller.documents()["west"]
        assert doc.providers[0].signals.queue_depth == 0.7
        assert doc.sequence == 2
        served = peer.registry.get_sample_value("grid_signals_connections_total", {"class": "peer"})
        assert served == 1  # keep-alive: three polls, one handshake
        assert poller.polls.value("ok") == 2 and poller.polls.value("not_modified") == 1
    finally:
        await peer.server.stop()


async def test_ten_polls_make_one_connection_and_one_handshake(
    signals_pki: SignalsPki, poller: SignalsPoller
) -> None:
    peer = Peer(signals_pki)
    peer.source.feed.update([entry("west", 0.5)], T0)
    address = await peer.start()
    try:
        outcomes = [await poller.poll("west", address) for _ in range(10)]
        assert outcomes == [PollOutcome.OK] + [PollOutcome.NOT_MODIFIED] * 9
        assert peer.served() == 1
        assert ListenerLimits().idle_timeout_s > KEEPALIVE_S  # the client lets go first
    finally:
        await peer.server.stop()


async def test_after_the_server_closes_an_idle_connection_the_next_poll_reconnects(
    signals_pki: SignalsPki, poller: SignalsPoller
) -> None:
    peer = Peer(signals_pki, limits=ListenerLimits(idle_timeout_s=0.2))
    peer.source.feed.update([entry("west", 0.5)], T0)
    address = await peer.start()
    try:
        assert await poller.poll("west", address) is PollOutcome.OK
        await eventually(lambda: peer.open() == 0, "the idle connection closed by the server")
        assert await poller.poll("west", address) is PollOutcome.NOT_MODIFIED
        assert peer.served() == 2
        assert poller.polls.value("error") == 0
    finally:
        await peer.server.stop()


async def test_a_silent_peer_keeps_its_last_document(
    signals_pki: SignalsPki, poller: SignalsPoller
) -> None:
    peer = Peer(signals_pki)
    peer.source.feed.update([entry("west", 0.5)], T0)
    address = await peer.start()
    assert await poller.poll("west", address) is PollOutcome.OK
    await peer.server.stop()
    assert await poller.poll("west", address) is PollOutcome.ERROR
    assert poller.documents()["west"].providers[0].signals.queue_depth == 0.5
    assert poller.polls.value("error") == 1


async def test_a_document_naming_another_site_is_refused(
    signals_pki: SignalsPki, poller: SignalsPoller
) -> None:
    peer = Peer(signals_pki, served_as="central")
    address = await peer.start()
    try:
        assert await poller.poll("west", address) is PollOutcome.ERROR
        assert "west" not in poller.documents()
    finally:
        await peer.server.stop()


async def test_a_server_outside_the_declared_trust_is_not_believed(
    signals_pki: SignalsPki,
) -> None:
    peer = Peer(signals_pki)
    address = await peer.start()
    east = signals_pki.leaves["east"]
    # East trusts only rogue as a peer: west's certificate is not an authorized peer.
    trust = trust_of(signals_pki, "east", "rogue")
    poller = SignalsPoller(
        client_context(signals_pki.ca, east.cert, east.key), lambda: trust, CollectorRegistry()
    )
    try:
        assert await poller.poll("west", address) is PollOutcome.ERROR
    finally:
        await poller.close()
        await peer.server.stop()
