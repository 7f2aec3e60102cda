"""The mTLS signals server: ``GET /v1/site/signals`` (SPEC-DECISIONS §6) and its metrics.

`SignalsServer` serves one aiohttp application on the edge every listener
shares (`grid.adapters.edge_connection`), under the signals listener's caps
(`grid.core.signals.connections.ListenerLimits`): every caller is classified
from its certificate before a request is read, so each handler knows whether it
talks to the site itself (Local) or to a peer. A peer past the peer cap is
closed at once; a certificate that is neither Local nor an authorized peer's is
answered 403 ``{code: "unauthorized"}`` and closed, without reading the request.
The server owns no signals: a `SignalsSource` hands it the current `Published`
document of each scope, and the server answers with those exact bytes and their
strong ``ETag``, or ``304`` with no body when ``If-None-Match`` names it.

More routes (the ingest feedback POST, seed 000) are added with `route` before
`start`; `connection_class` tells a handler who is calling. Every refusal is
JSON ``{code, message}``, including aiohttp's own (404, 405, an oversized or
malformed request line or head). Deadlines and error logging are the shared
listener policy's (`grid.adapters.http_listener`), so nothing a client sent
reaches the logs.
A route that waits on anything (the ingest POST reads and writes the store)
runs within the request budget; past it the answer is 504 ``budget_exceeded``.
The signals GET answers from memory without awaiting, so it carries no timer.

Metrics (closed label sets, no identities): requests by route and status code,
connections by class, refused connections by reason.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from grid.adapters.edge_connection import Admitted, Edge, EdgeConnection, cancel_handshakes
from grid.adapters.health_server import ClosedCounter
from grid.adapters.http_listener import ListenerPolicy, PolicedRequestHandler
from grid.core.edge.connections import ConnectionBook, Refusal
from grid.core.routing.signals import Published, SignalsScope, etag_matches, parse_scope
from grid.core.signals.connections import ConnectionClass, ListenerLimits, connection_class
from grid.core.trust import PeerClass, TrustPolicy
from grid.errors import ValidationError

SIGNALS_PATH = "/v1/site/signals"
INGEST_PATH = "/v1/site/signals/ingest"
DEFAULT_SIGNALS_PORT = 7947
"""The signals listener's port (SPEC-DECISIONS §1)."""

ROUTES = {SIGNALS_PATH: "signals", INGEST_PATH: "ingest"}
"""Route labels of the request metric; any other path counts as ``other``."""
CODES = ("200", "204", "304", "400", "403", "404", "405", "409", "413", "429", "500", "503")
"""Status-code labels of the request metric, plus ``504`` and ``other``."""

_REFUSAL_CODES = {
    400: "malformed_request",
    403: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_not_empty",
    500: "internal_error",
    504: "budget_exceeded",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

REFUSAL_LABELS = {Refusal.CLASS_FULL: "peers_full"}
"""Refused-connection labels that differ from the book's reason (only peers have a
class cap here); every other label is the reason's value."""


def refusal_bytes(status: int, reason: str, code: str, message: str) -> bytes:
    """A complete ``Connection: close`` HTTP/1.1 response with a JSON ``{code, message}``."""
    body = json.dumps({"code": code, "message": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


UNAUTHORIZED_RESPONSE = refusal_bytes(
    403,
    "Forbidden",
    "unauthorized",
    "the client certificate is neither this site's own nor an authorized peer's",
)


class SignalsSource(Protocol):
    """Where the server reads the current document of each scope."""

    def published(self, scope: SignalsScope) -> Published:
        """The document currently served for ``scope``."""
        ...


def refusal(status: int, code: str, message: str) -> web.Response:
    """A JSON ``{code, message}`` refusal."""
    return web.json_response({"code": code, "message": message}, status=status)


class RequestMetrics:
    """``grid_signals_requests_total{route, code}``, with both label sets closed."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.routes = (*sorted(set(ROUTES.values())), "other")
        self.codes = (*CODES, "504", "other")
        self._counter = Counter(
            "grid_signals_requests",
            "Signals listener requests by route and status code.",
            ["route", "code"],
            registry=registry,
        )
        # Children looked up once: a labels() call per request costs more than the answer.
        self._children = {
            (route, code): self._counter.labels(route, code)
            for route in self.routes
            for code in self.codes
        }

    def observe(self, path: str | None, status: int) -> None:
        """Count one answered request (unknown paths and codes fold into ``other``)."""
        route = ROUTES.get(path or "", "other")
        code = str(status)
        child = self._children.get((route, code)) or self._children[(route, "other")]
        child.inc()


class SignalsServer:
    """The signals listener: classified mTLS connections and the signals routes."""

    def __init__(
        self,
        source: SignalsSource,
        ssl_context: ssl.SSLContext,
        trust: Callable[[], TrustPolicy],
        registry: CollectorRegistry,
        limits: ListenerLimits | None = None,
    ) -> None:
        self.source = source
        self.ssl_context = ssl_context
        self.limits = limits or ListenerLimits()
        self.book = ConnectionBook(self.limits.caps())
        self.requests = RequestMetrics(registry)
        self.connections = ClosedCounter(
            "grid_signals_connections_total",
            "Signals listener connections accepted, by class.",
            "class",
            [c.value for c in ConnectionClass],
            registry,
        )
        self.open_connections = Gauge(
            "grid_signals_open_connections",
            "Signals listener connections open now, by class.",
            ["class"],
            registry=registry,
        )
        self.open_connections.labels(ConnectionClass.LOCAL.value).set_function(
            lambda: self.book.held(ConnectionClass.LOCAL)
        )
        self.open_connections.labels(ConnectionClass.PEER.value).set_function(
            lambda: self.book.held(ConnectionClass.PEER)
        )
        self.refused = ClosedCounter(
            "grid_signals_refused_connections_total",
            "Signals listener connections refused, by reason (handshake: no valid certificate).",
            "reason",
            [*(REFUSAL_LABELS.get(r, r.value) for r in Refusal), "handshake"],
            registry,
        )
        self._trust = trust
        self._edge = Edge(
            self.book,
            self.limits.header_timeout_s,
            tls=ssl_context,
            handshake_timeout_s=self.limits.handshake_timeout_s,
            classify=self._classify,
            unauthorized_answer=UNAUTHORIZED_RESPONSE,
            on_refused=self._count_refusal,
            on_classified=self.connections.inc,
        )
        self._routes: list[tuple[str, str, Handler]] = [("GET", SIGNALS_PATH, self._signals)]
        self._budgeted: set[Handler] = set()
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self.address: tuple[str, int] | None = None

    def _classify(self, transport: asyncio.Transport) -> ConnectionClass | None:
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        return connection_class(self._trust().classify(der) if der else PeerClass.UNKNOWN)

    def _count_refusal(self, refusal: Refusal | None) -> None:
        label = "handshake" if refusal is None else REFUSAL_LABELS.get(refusal, refusal.value)
        self.refused.inc(label)

    def route(self, method: str, path: str, handler: Handler) -> None:
        """Add a route before `start` (the ingest POST, for one); it runs within the budget."""
        if self._runner is not None:
            raise RuntimeError("routes are added before start")
        self._routes.append((method, path, handler))
        self._budgeted.add(handler)

    def connection_class(self, request: web.Request) -> ConnectionClass | None:
        """The class of the connection a request arrived on."""
        transport = request.transport
        found = self._edge.classes.get(transport) if transport is not None else None
        return ConnectionClass(found) if found is not None else None

    def app(self) -> web.Application:
        """The aiohttp application: the routes behind the budget-and-refusal middleware."""
        app = web.Application(middlewares=[self._policy], client_max_size=1024)
        for method, path, handler in self._routes:
            app.router.add_route(method, path, handler)
        return app

    @web.middleware
    async def _policy(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if handler in self._budgeted:
                async with asyncio.timeout(self.limits.request_budget_s):
                    response = await handler(request)
            else:
                response = await handler(request)
        except web.HTTPException as exc:
            code = _REFUSAL_CODES.get(exc.status, "malformed_request")
            response = refusal(exc.status, code, exc.reason)
            if exc.status == 405:
                response.headers["Allow"] = exc.headers.get("Allow", "")
        except TimeoutError:
            response = refusal(504, "budget_exceeded", "the request did not finish in time")
            response.force_close()
        self.requests.observe(request.path, response.status)
        return response

    def _error_answer(self, status: int, reason: str) -> web.StreamResponse:
        """The answer to a request the listener refuses before routing (a malformed head)."""
        self.requests.observe(None, status)
        code = {500: "internal_error", 504: "budget_exceeded"}.get(status, reason)
        return refusal(status, code, "request refused")

    async def _signals(self, request: web.Request) -> web.StreamResponse:
        try:
            scope = parse_scope(request.query.get("scope"))
        except ValidationError:
            return refusal(400, "invalid_scope", "scope must be site or grid")
        if request.content_length or request.headers.get("Transfer-Encoding"):
            response = refusal(413, "body_not_empty", "a GET carries no body")
            response.force_close()
            return response
        published = self.source.published(scope)
        headers = {"ETag": published.etag, "Cache-Control": "no-cache"}
        if etag_matches(request.headers.get("If-None-Match"), published.etag):
            return web.Response(status=304, headers=headers)
        return web.Response(body=published.body, content_type="application/json", headers=headers)

    async def start(self, host: str, port: int = DEFAULT_SIGNALS_PORT) -> tuple[str, int]:
        """Listen on host:port (0 picks a free port); returns the bound address."""
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        self._runner = runner
        server = runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        limits = self.limits

        policy = ListenerPolicy(
            header_read_timeout_s=limits.header_timeout_s,
            idle_timeout_s=limits.idle_timeout_s,
            connections_max=limits.connections_max,
        )

        def handler(admitted: Admitted) -> asyncio.Protocol:
            return PolicedRequestHandler(
                server,
                admitted,
                policy,
                self._error_answer,
                max_line_size=limits.request_line_bytes_max,
                max_field_size=limits.header_field_bytes_max,
                max_headers=limits.headers_max,
            )

        try:
            self._listener = await loop.create_server(
                lambda: EdgeConnection(self._edge, handler),
                host,
                port,
                reuse_address=True,
                backlog=limits.connections_max,
            )
        except OSError:
            await self.stop()
            raise
        bound = self._listener.sockets[0].getsockname()
        self.address = (str(bound[0]), int(bound[1]))
        return self.address

    async def stop(self) -> None:
        """Stop listening, end open connections, and cancel handshakes in progress."""
        if self._listener is not None:
            self._listener.close()
        await cancel_handshakes(self._edge.handshakes)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None
