"""Provider checks reuse one kept-alive connection per provider: real sockets on 127.0.0.1.

The provider is an `HttpListener` (Grid's listener policy, its idle timeout
included), over HTTPS with a required client certificate where TLS is tested,
so every new connection is a TCP accept and a full mTLS handshake. The server
counts the connections it accepted (by client port) and holds open now.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from grid.adapters.http_listener import HttpListener, ListenerPolicy
from grid.adapters.probe_sessions import PROBE_KEEPALIVE_S, probe_session
from grid.adapters.tls_probe import server_context
from grid.core.resources import API_VERSION, SITE_LABEL, InferenceProvider
from grid.core.resources.provider_spec import HealthCheck, MetricsConfig
from grid.operator.providers import ProviderController, ProviderState
from grid.operator.schedule import JITTER_RATIO
from grid.testing.poll import eventually

from .test_provider_tls import EXPOSITION, TLS, secrets  # noqa: F401  (the fixture)

DEADLINE_S = 5.0
"""Shorter than aiohttp's 15 s default keep-alive, which closed nothing sooner."""


class Provider:
    """/health and /metrics under a listener policy, counting connections."""

    def __init__(self, policy: ListenerPolicy, tls: Any = None) -> None:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        self.listener = HttpListener(app, policy, ssl_context=tls)
        self.clients: set[tuple[str, int]] = set()
        self.requests = 0

    def _seen(self, request: web.Request) -> None:
        assert request.transport is not None
        self.clients.add(request.transport.get_extra_info("peername")[:2])
        self.requests += 1

    async def health(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.Response(text=EXPOSITION)

    @property
    def open(self) -> int:
        return self.listener.connections.total


@pytest.fixture
async def https(pki: Any) -> AsyncIterator[tuple[Provider, str]]:
    west = pki.sites["west"]
    provider = Provider(ListenerPolicy(), server_context(pki.ca, west.cert, west.key))
    host, port = await provider.listener.start("127.0.0.1", 0)
    yield provider, f"https://{host}:{port}"
    await provider.listener.stop()


async def plain(idle_s: float = 30.0) -> tuple[Provider, str]:
    provider = Provider(ListenerPolicy(idle_timeout_s=idle_s))
    host, port = await provider.listener.start("127.0.0.1", 0)
    return provider, f"http://{host}:{port}"


def provider_doc(url: str, *, tls: bool, pace: str = "60s") -> dict[str, Any]:
    checks: dict[str, Any] = {"interval": pace, "timeout": "50ms" if pace == "50ms" else "1s"}
    if tls:
        checks["tls"] = TLS
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceProvider",
        "metadata": {"name": "vllm", "labels": {SITE_LABEL: "east"}},
        "spec": {
            "gridNetworkRef": "prod",
            "backendKind": "local",
            "providerKind": "self_hosted",
            "endpoint": url,
            "models": [{"name": "llama"}],
            "healthCheck": {**checks, "path": "/health"},
            "metricsConfig": {**checks, "poolName": "llama-pool", "queueCapacity": 16},
        },
    }


async def test_ten_checks_over_mtls_make_one_connection_and_one_handshake(
    secrets: Any,  # noqa: F811
    https: tuple[Provider, str],
) -> None:
    """Health and metrics declare the same ``tls``: one context, one pool, one
    connection (the old controller built a context, so a connection, for each)."""
    server, url = https
    ctl = ProviderController(secrets, "east", lambda _n, _r: None, refresh_s=60.0)
    state = ProviderState(InferenceProvider.model_validate(provider_doc(url, tls=True)))
    try:
        for _ in range(5):
            assert await ctl._http_health(state)
            assert (await ctl._http_scrape(state)).values.queue_depth == 0.5
    finally:
        assert state.session is not None
        await state.session.close()
    assert server.requests == 10
    assert len(server.clients) == 1  # one TCP accept, so one TLS handshake


async def test_a_deleted_providers_connection_is_closed_at_once(store: Any) -> None:
    server, url = await plain()
    ctl = ProviderController(store, "east", lambda _n, _r: None, refresh_s=60.0)
    try:
        doc = await store.create(provider_doc(url, tls=False, pace="50ms"))
        ctl.sync([InferenceProvider.model_validate(doc)])
        await eventually(lambda: server.requests >= 6 and server.open >= 1, "six checks")
        ctl.sync([])
        await eventually(lambda: server.open == 0, "the connection closed", timeout_s=DEADLINE_S)
    finally:
        await ctl.stop()
        await server.listener.stop()


async def test_stop_closes_every_providers_connection(store: Any) -> None:
    server, url = await plain()
    ctl = ProviderController(store, "east", lambda _n, _r: None, refresh_s=60.0)
    try:
        doc = await store.create(provider_doc(url, tls=False, pace="50ms"))
        ctl.sync([InferenceProvider.model_validate(doc)])
        await eventually(lambda: server.requests >= 2 and server.open >= 1, "kept alive")
        await ctl.stop()
        await eventually(lambda: server.open == 0, "closed at stop", timeout_s=DEADLINE_S)
    finally:
        await server.listener.stop()


async def test_a_connection_the_server_closed_idle_is_replaced_transparently(
    store: Any,
) -> None:
    server, url = await plain(idle_s=0.2)
    ctl = ProviderController(store, "east", lambda _n, _r: None, refresh_s=60.0)
    state = ProviderState(InferenceProvider.model_validate(provider_doc(url, tls=False)))
    try:
        assert await ctl._http_health(state)
        await eventually(lambda: server.open == 0, "the server closed the idle connection")
        assert await ctl._http_health(state)
        assert (await ctl._http_scrape(state)).values.queue_depth == 0.5
        assert server.requests == 3 and len(server.clients) == 2
    finally:
        assert state.session is not None
        await state.session.close()
        await server.listener.stop()


def test_connections_outlive_every_default_interval_and_not_the_listeners_idle() -> None:
    longest = max(
        float(HealthCheck().interval.rstrip("s")), float(MetricsConfig().interval.rstrip("s"))
    )
    assert longest * (1 + JITTER_RATIO) < PROBE_KEEPALIVE_S < ListenerPolicy().idle_timeout_s


async def test_the_probe_session_carries_no_headers_or_credentials() -> None:
    session = probe_session()
    try:
        assert not session.headers and session.auth is None
        assert session.connector is not None
        assert session.connector._keepalive_timeout == PROBE_KEEPALIVE_S
    finally:
        await session.close()
