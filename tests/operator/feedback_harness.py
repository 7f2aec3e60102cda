"""The ingest endpoint on a real mTLS signals listener, for the feedback tests.

`serving` starts a `SignalsServer` on 127.0.0.1 with the ingest route wired
exactly as the operator wires it (`grid.operator.feedback_ingest.wire_ingest`),
over an in-memory store holding one GridNetwork and wrapped in a `FaultyStore`.
`Harness.post` sends one report with a chosen client certificate.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry

from grid.adapters.signals_server import SignalsServer
from grid.adapters.tls_probe import client_context, server_context
from grid.core.routing.signals import Published, SignalsFeed, SignalsScope
from grid.core.signals.connections import ListenerLimits
from grid.core.signals.feedback import Report, report_headers
from grid.core.trust import TrustPolicy, fingerprint_pem
from grid.operator.feedback_ingest import wire_ingest
from grid.operator.feedback_writer import FeedbackEvents, FeedbackSettings
from grid.operator.signals import leaf_der
from grid.testing.faulty_store import FaultyStore
from grid.testing.store import InMemoryStore

NETWORK = "net"
INGEST = "/v1/site/signals/ingest"
ECHO = ("x-grid-ingest-epoch", "x-grid-ingest-sequence")


def no_echo(headers: dict[str, str]) -> bool:
    """True when an answer carries neither echo header."""
    lowered = {k.lower() for k in headers}
    return not any(name in lowered for name in ECHO)


class OneFeed:
    """A signals source serving one empty document for both scopes."""

    def __init__(self) -> None:
        self.feed = SignalsFeed(NETWORK, "east", 1, datetime(2026, 1, 1, tzinfo=UTC))

    def published(self, scope: SignalsScope) -> Published:
        return self.feed.current


@dataclass
class Answer:
    """One HTTP answer."""

    status: int
    headers: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class Harness:
    """A running ingest endpoint and what a test inspects."""

    server: SignalsServer
    store: FaultyStore
    registry: CollectorRegistry
    events: FeedbackEvents
    url: str
    contexts: dict[str, ssl.SSLContext]

    async def post(
        self,
        headers: Iterable[tuple[str, str]] | Report,
        who: str = "east",
        data: Any = None,
    ) -> Answer:
        """POST one report as ``who`` on a fresh connection."""
        items = report_headers(headers).items() if isinstance(headers, Report) else headers
        connector = aiohttp.TCPConnector(ssl=self.contexts[who], force_close=True)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.post(self.url + INGEST, headers=CIMultiDict(items), data=data) as resp,
        ):
            raw = await resp.read()
            body = await resp.json() if raw else None
            return Answer(resp.status, dict(resp.headers), body)

    async def get_signals(self, who: str = "east") -> int:
        """GET /v1/site/signals as ``who``; the status."""
        connector = aiohttp.TCPConnector(ssl=self.contexts[who], force_close=True)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get(self.url + "/v1/site/signals") as resp,
        ):
            return resp.status

    async def status(self) -> dict[str, Any]:
        """The GridNetwork's status as stored."""
        obj = await self.store.get("GridNetwork", NETWORK)
        return dict(obj.get("status") or {})

    def event(self, name: str) -> float:
        """One count of grid_gateway_feedback_events_total."""
        value = self.registry.get_sample_value(
            "grid_gateway_feedback_events_total", {"event": name}
        )
        return value or 0.0


async def network_store() -> InMemoryStore:
    """An in-memory store holding the one GridNetwork."""
    store = InMemoryStore()
    await store.create(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": NETWORK},
            "spec": {"signalTransport": {"mode": "poll"}},
        }
    )
    return store


@contextlib.asynccontextmanager
async def serving(
    ca: Path,
    sites: dict[str, tuple[Path, Path]],
    *,
    trust_mode: str = "pin",
    settings: FeedbackSettings | None = None,
    enabled: bool = True,
    limits: ListenerLimits | None = None,
) -> AsyncIterator[Harness]:
    """The endpoint served with east's certificate; west is an authorized peer."""
    store = FaultyStore(await network_store())
    cert, key = sites["east"]
    if trust_mode == "pin":
        trust = TrustPolicy.pin(
            fingerprint_pem(cert.read_bytes()), [fingerprint_pem(sites["west"][0].read_bytes())]
        )
    else:
        trust = TrustPolicy.spiffe(leaf_der(cert), "grid.local")
    registry = CollectorRegistry()
    server = SignalsServer(
        OneFeed(), server_context(ca, cert, key), lambda: trust, registry, limits
    )
    events, _writer = wire_ingest(
        server,
        store,
        NETWORK,
        registry,
        (settings or FeedbackSettings()) if enabled else None,
    )
    host, port = await server.start("127.0.0.1", 0)
    contexts = {name: client_context(ca, c, k) for name, (c, k) in sites.items()}
    try:
        yield Harness(server, store, registry, events, f"https://{host}:{port}", contexts)
    finally:
        await server.stop()
