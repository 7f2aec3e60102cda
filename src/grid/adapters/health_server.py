"""The operator's metrics and health endpoint (TCP 9090 by default, SPEC-DECISIONS §1).

``GET /metrics`` is the Prometheus exposition of the operator's own registry;
``GET /healthz`` answers 200 while the process serves at all (a liveness probe);
``GET /readyz`` answers 200 when the ready callback says so and 503 otherwise (a
readiness probe: the store is open, the first reconcile done, and so on).

Metric label sets are closed enums (CONVENTIONS 8): `ClosedCounter` declares
every allowed label value up front, exports each at 0 from the start, and refuses
any other value, so an identity, header or error string can never become a label.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from grid.adapters.http_listener import HttpListener, ListenerPolicy

DEFAULT_METRICS_HOST = "0.0.0.0"
DEFAULT_METRICS_PORT = 9090
"""The operator's metrics/health port (SPEC-DECISIONS §1)."""
METRICS_POLICY = ListenerPolicy(
    header_read_timeout_s=5.0, idle_timeout_s=30.0, connections_max=128, evict_unsettled=True
)
"""The metrics listener's deadlines and cap. It is unauthenticated and often bound to
every interface, so the cap is small: enough for scrapers, probes and a few UI
viewers, far below a process's 1,024 file descriptors. When it is full, the oldest
connection without a complete request head makes room, so liveness probes still get
through a flood of slow connections."""

ReadyCheck = Callable[[], bool | Awaitable[bool]]


class ClosedCounter:
    """A counter with one label whose values form a closed, pre-declared set."""

    def __init__(
        self,
        name: str,
        documentation: str,
        label: str,
        values: Iterable[str],
        registry: CollectorRegistry,
    ) -> None:
        self.allowed = frozenset(values)
        if not self.allowed:
            raise ValueError("a closed label needs at least one value")
        self.name = name.removesuffix("_total")
        self._label = label
        self._registry = registry
        self._counter = Counter(self.name, documentation, [label], registry=registry)
        for value in sorted(self.allowed):
            self._counter.labels(value)

    def inc(self, value: str, amount: float = 1.0) -> None:
        """Count one event of a declared kind; an undeclared value is a programming error."""
        if value not in self.allowed:
            raise ValueError(f"undeclared {self._label} value for {self.name}")
        self._counter.labels(value).inc(amount)

    def value(self, label_value: str) -> float:
        """The current count of one label value (for tests and status)."""
        sample = self._registry.get_sample_value(f"{self.name}_total", {self._label: label_value})
        return 0.0 if sample is None else float(sample)


class HealthServer:
    """Serves /metrics, /healthz and /readyz for one process."""

    def __init__(
        self,
        registry: CollectorRegistry,
        ready: ReadyCheck | None = None,
        policy: ListenerPolicy = METRICS_POLICY,
    ) -> None:
        self.registry = registry
        self._ready = ready
        self.role: str | None = None
        """With leader election, ``leader`` or ``follower``: /readyz names it."""
        self.policy = policy
        self.mounts: list[Callable[[web.Application], None]] = []
        """More read-only routes served on this listener (the live view's `add_to`)."""
        self._listener: HttpListener | None = None

    def app(self) -> web.Application:
        """The aiohttp application with the three routes."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        for mount in self.mounts:
            mount(app)
        return app

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        ready = True
        if self._ready is not None:
            outcome = self._ready()
            ready = bool(await outcome) if inspect.isawaitable(outcome) else bool(outcome)
        role = f"role: {self.role}\n" if self.role else ""
        if ready:
            return web.Response(text=f"ready\n{role}")
        return web.Response(text=f"not ready\n{role}", status=503)

    async def start(
        self, host: str = DEFAULT_METRICS_HOST, port: int = DEFAULT_METRICS_PORT
    ) -> tuple[str, int]:
        """Listen on host:port (0 picks a free port); returns the bound address."""
        listener = HttpListener(self.app(), self.policy)
        bound = await listener.start(host, port)
        self._listener = listener
        return bound

    async def stop(self) -> None:
        """Stop serving."""
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
