"""Plaintext egress probes (a TCP connect, as upstream probes them) and upstream's probe metrics.

West's egress is a real TCP listener on loopback that records what it received:
a plaintext probe connects and closes without sending a byte, and never makes the
site Active. The mTLS walk of `test_sites` is counted in
``grid_gateway_probe_total``, ``grid_gateway_probe_duration_seconds`` and
``grid_site_phase_transition_total`` under upstream's label values.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from grid.adapters.egress_listener import EgressListener
from grid.adapters.tls_probe import ProbeOutcome, client_context, server_context
from grid.core.resources.phases import SitePhase
from grid.operator.sites import SiteController, SiteMetrics

from .test_sites import add_site, round_, walk_to_active


class PlainListener:
    """A TCP endpoint that counts connections and the bytes each one sent."""

    def __init__(self) -> None:
        self.connections = 0
        self.received = b""
        self._server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            self.received += await reader.read(4096)
            writer.close()

        self._server = await asyncio.start_server(handle, "127.0.0.1", port)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


@pytest.fixture
async def plain() -> AsyncIterator[tuple[PlainListener, str]]:
    listener = PlainListener()
    address = await listener.start()
    yield listener, address
    await listener.stop()


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def make_plaintext(store: Any, address: str) -> None:
    obj = await store.get("GridSite", "west")
    obj["spec"]["egress"] = {"address": address, "tls": {"mode": "Plaintext"}}
    await store.replace(obj)


@pytest.mark.parametrize("with_certs", [True, False])
async def test_a_plaintext_egress_is_reachable_but_never_verified(
    store: Any, pki: Any, plain: tuple[PlainListener, str], with_certs: bool
) -> None:
    registry = CollectorRegistry()
    east = pki.sites["east"]
    tls = client_context(pki.ca, east.cert, east.key) if with_certs else None
    controller = SiteController(store, "east", tls, metrics=SiteMetrics(registry))
    listener, address = plain
    await add_site(store, None, pki.sites["west"].fingerprint)
    await make_plaintext(store, address)
    phases = [(await round_(controller, store)).phase for _ in range(5)]
    assert phases == [SitePhase.DISCOVERED] + [SitePhase.CONNECTING] * 4
    site = await round_(controller, store)
    assert site.status is not None and site.status.reason == "IdentityVerificationRequired"
    reached = sample(
        registry, "grid_gateway_probe_total", outcome="PlaintextReachable", tls_mode="Plaintext"
    )
    # Rounds 3 to 6 probe (Pending and Discovered call for none).
    assert reached == 4
    assert listener.connections == 4 and listener.received == b""
    await listener.stop()
    site = await round_(controller, store)
    assert site.phase is SitePhase.CONNECTING
    assert site.status is not None and site.status.reason == "PlaintextUnreachable"
    unreached = sample(
        registry, "grid_gateway_probe_total", outcome="PlaintextUnreachable", tls_mode="Plaintext"
    )
    assert unreached == 1
    assert sample(registry, "grid_gateway_probe_duration_seconds_count") == 5
    await listener.start()


async def test_an_active_site_switched_to_plaintext_falls_to_unreachable(
    store: Any, pki: Any, plain: tuple[PlainListener, str]
) -> None:
    west = pki.sites["west"]
    egress = EgressListener(server_context(pki.ca, west.cert, west.key))
    host, port = await egress.start("127.0.0.1", 0)
    east = pki.sites["east"]
    registry = CollectorRegistry()
    controller = SiteController(
        store, "east", client_context(pki.ca, east.cert, east.key), metrics=SiteMetrics(registry)
    )
    try:
        await add_site(store, f"{host}:{port}", west.fingerprint)
        assert (await walk_to_active(controller, store))[-1] is SitePhase.ACTIVE
        await make_plaintext(store, plain[1])
        site = await round_(controller, store)
        assert site.phase is SitePhase.UNREACHABLE
        assert site.status is not None and site.status.reason == "IdentityVerificationRequired"
    finally:
        await egress.stop()
    transitions = {
        (s.labels["from_phase"], s.labels["to_phase"], s.labels["reason"]): s.value
        for metric in registry.collect()
        if metric.name == "grid_site_phase_transition"
        for s in metric.samples
        if s.name.endswith("_total")
    }
    assert transitions == {
        ("None", "Discovered", "SwimMemberAlive"): 1,
        ("Discovered", "Connecting", "EgressKnown"): 1,
        ("Connecting", "Active", "FingerprintVerified"): 1,
        ("Active", "Unreachable", "IdentityVerificationRequired"): 1,
    }
    verified = sample(registry, "grid_gateway_probe_total", outcome="Verified", tls_mode="Mutual")
    assert verified == 1


async def test_every_probe_outcome_series_exists_before_any_probe() -> None:
    registry = CollectorRegistry()
    SiteMetrics(registry)
    for outcome in ProbeOutcome:
        mode = "Plaintext" if outcome.value.startswith("Plaintext") else "Mutual"
        labels = {"outcome": outcome.value, "tls_mode": mode}
        assert registry.get_sample_value("grid_gateway_probe_total", labels) == 0.0
    labels = {"outcome": "AddressMissing", "tls_mode": "Plaintext"}
    assert registry.get_sample_value("grid_gateway_probe_total", labels) == 0.0


async def test_a_refused_handshake_and_a_wrong_pin_are_told_apart(
    store: Any, pki: Any, plain: tuple[PlainListener, str]
) -> None:
    east = pki.sites["east"]
    registry = CollectorRegistry()
    controller = SiteController(
        store, "east", client_context(pki.ca, east.cert, east.key), metrics=SiteMetrics(registry)
    )
    # A plain TCP endpoint where mTLS is declared: the handshake fails, not the connect.
    await add_site(store, plain[1], pki.sites["central"].fingerprint)
    for _ in range(3):
        await round_(controller, store)
    failed = sum(
        sample(registry, "grid_gateway_probe_total", outcome=o, tls_mode="Mutual")
        for o in ("TlsProtocolError", "ConnectionFailed", "HandshakeTimeout")
    )
    assert failed == 1
    assert sample(registry, "grid_gateway_probe_total", outcome="Verified", tls_mode="Mutual") == 0
