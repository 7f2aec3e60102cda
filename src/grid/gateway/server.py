"""`Gateway`: one ``grid gateway`` process, wired from praxis.yaml.

It loads the config, takes its candidates (inline, or from the overlay file,
which must verify at cold start), opens one pooled client per cluster, and
serves the public listener and the admin listener (``/ready``, ``/metrics``,
``/snapshot``). In overlay-file mode a background task checks the file every
``overlay_poll_interval_s`` and swaps in a new snapshot only once it
verifies; the same task takes up a changed budget view (``grid-budgets.json``,
`grid.gateway.metering`). `stop` (SIGTERM) closes the listener at once and lets in-flight
requests, streams included, finish within ``shutdown_timeout_secs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from pathlib import Path

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from grid.adapters.file_stamp import file_stamp
from grid.adapters.http_listener import HttpListener
from grid.adapters.tracing import server_middlewares
from grid.core.address import format_address, parse_address
from grid.core.routing.rerank import RerankContext, reported_requests, rerank
from grid.core.routing.signals import SignalsDocument
from grid.gateway.client_auth import ClientAuth, server_context
from grid.gateway.config import ConfigError, PraxisConfig, load_config
from grid.gateway.descriptors import connection_cap, raise_nofile
from grid.gateway.feedback import FeedbackReporter, HttpIngestTransport
from grid.gateway.ingest_reports import IngestReports
from grid.gateway.metering import BUDGETS_FILE, TenantMeter
from grid.gateway.metrics import GatewayMetrics
from grid.gateway.proxy import Proxy
from grid.gateway.settings import GatewaySettings
from grid.gateway.signals_poll import OperatorSignals, SiteCredentials
from grid.gateway.snapshot import OverlayFile, Snapshot, ranked_group_key, snapshot_of
from grid.gateway.upstream import Upstream, upstreams

log = logging.getLogger(__name__)


class Gateway:
    """The routing gateway; `start`, then `stop` to drain and exit."""

    def __init__(
        self,
        config: PraxisConfig,
        settings: GatewaySettings | None = None,
        config_path: Path | None = None,
        operator: str | None = None,
        credentials: SiteCredentials | None = None,
    ) -> None:
        """``operator`` (``host:port`` of its signals listener) with ``credentials``
        turns on poll mode: candidates are re-ranked by the signals pulled from it."""
        self.config = config
        self.config_path = config_path
        self._config_stamp = file_stamp(config_path)
        self.settings = settings or GatewaySettings()
        self.overlay: OverlayFile | None = None
        if config.overlay_file is not None:
            # Raises OverlayRejected: an invalid file at cold start refuses to start.
            self.overlay = OverlayFile(
                Path(config.overlay_file),
                config.expected_scope,
                self.settings.overlay_max_bytes,
                ranked_group_key(config.ranking or RerankContext(config.local_site)),
            )
        self._inline = config.inline
        self.upstreams = upstreams(config.clusters, self.settings)
        self.metrics = GatewayMetrics(config.clusters)
        self.signals: OperatorSignals | None = None
        self.reports: IngestReports | None = None
        self._ingest: HttpIngestTransport | None = None
        if operator is not None:
            if credentials is None:
                raise ValueError("poll mode needs the site certificate, key and CA")
            if self.settings.feedback_enabled:
                self.reports = self._reporter(operator, credentials)
            self.signals = OperatorSignals(
                operator,
                credentials,
                self.settings,
                outcomes=self.metrics.signals_polls,
                on_ingest=lambda accepted: self._report("signals", accepted),
            )
        self._ranking = config.ranking or RerankContext(config.local_site)
        self._ranked: tuple[Snapshot, SignalsDocument, Snapshot] | None = None
        self._poll: asyncio.Task[None] | None = None
        self._deliver: asyncio.Task[None] | None = None
        self.meter = TenantMeter(*self._budget_paths())
        self.metrics.registry.register(self.meter)
        self.client_auth = ClientAuth(config.client_auth, self.settings.tenant_header)
        self.metrics.registry.register(self.client_auth)
        self.proxy = Proxy(
            config,
            self.settings,
            self.snapshot,
            self.upstreams,
            self.metrics,
            self.meter,
            self.client_auth,
        )
        # Client bodies are relayed as sent (a compressed one is not unpacked).
        public = self.proxy.app()
        # One server span per request while tracing is on (SPEC-DECISIONS §17).
        public.middlewares[:0] = server_middlewares()
        policy = self.settings.listener
        cap = connection_cap(policy.connections_max, raise_nofile())
        self.public = HttpListener(
            public,
            replace(policy, connections_max=cap),
            auto_decompress=False,
            shutdown_timeout_s=config.shutdown_timeout_s,
            ssl_context=server_context(config.client_auth),
            reuse_port=self.settings.reuse_port,
        )
        self.admin = HttpListener(self._admin_app(), self.settings.listener)
        self.ready = False
        self._watch: asyncio.Task[None] | None = None
        self._register_gauges()

    def _reporter(self, operator: str, credentials: SiteCredentials) -> IngestReports:
        """The §7 ingest reporter of this process, over mTLS to ``operator``."""
        self._ingest = HttpIngestTransport(
            operator, credentials.client_context(), self.settings.feedback.request_timeout_s
        )
        reporter = FeedbackReporter(
            self._ingest, replica=self.settings.feedback_replica, settings=self.settings.feedback
        )
        return IngestReports(reporter)

    def _budget_paths(self) -> tuple[Path | None, Path | None]:
        """The budget view to enforce and the counters' state file (either may be None)."""
        budgets: Path | None = None
        if self.settings.budgets_file is not None:
            budgets = Path(self.settings.budgets_file)
        elif self.config.overlay_file is not None:
            budgets = Path(self.config.overlay_file).parent / BUDGETS_FILE
        state = self.settings.state_dir
        return budgets, (Path(state) / "tenant-tokens.json" if state is not None else None)

    def _report(self, source: str, accepted: bool) -> None:
        if self.reports is not None:
            self.reports.ingest(source, accepted)

    def base_snapshot(self) -> Snapshot:
        """The verified overlay's snapshot, in overlay order."""
        if self.overlay is not None:
            return self.overlay.snapshot
        assert self._inline is not None
        return self._inline

    def snapshot(self) -> Snapshot:
        """The snapshot new requests route by: re-ranked by pulled signals under poll.

        The re-ranked snapshot is computed once per (overlay, signals document)
        pair and reused until either changes; without a document yet the overlay
        order stands.
        """
        overlay = self.overlay
        base = overlay.snapshot if overlay is not None else self._inline
        assert base is not None
        document = self.signals.document if self.signals is not None else None
        if document is None:
            return base
        held = self._ranked
        if held is not None and held[0] is base and held[1] is document:
            return held[2]
        ordered = rerank(base.candidates, document, self._ranking)
        ranked = snapshot_of(ordered, base.revision, base.source, base.policy)
        if held is None or held[1] is not document:
            self.proxy.router.take_reports(reported_requests(base.candidates, document))
        self._ranked = (base, document, ranked)
        return ranked

    def _register_gauges(self) -> None:
        m = self.metrics
        m.gauge(
            "grid_gateway_affinity_bindings",
            "Live session bindings.",
            lambda: float(len(self.proxy.affinity)),
        )
        m.gauge(
            "grid_gateway_connections_open",
            "Open public connections.",
            lambda: float(self.public.connections.total),
        )
        m.gauge(
            "grid_gateway_connections_refused_total",
            "Connections refused at the cap.",
            lambda: float(self.public.connections.refused),
        )
        m.gauge(
            "grid_gateway_candidates",
            "Candidates in the active snapshot.",
            lambda: float(len(self.snapshot().candidates)),
        )
        m.reloads["accepted"].inc(1 if self.overlay is not None else 0)
        if self.reports is not None:
            reporter = self.reports.reporter
            m.gauge(
                "grid_gateway_ingest_rejected",
                "Rejected ingests in this reporter epoch (the cumulative §7 counter).",
                lambda: float(reporter.rejected),
            )
            m.gauge(
                "grid_gateway_feedback_pending",
                "1 while a feedback report awaits the operator's acknowledgement.",
                lambda: float(reporter.pending is not None),
            )

    # -- admin ------------------------------------------------------------------

    def _admin_app(self) -> web.Application:
        app = web.Application(client_max_size=1024)
        app.router.add_get("/ready", self._ready)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/snapshot", self._snapshot)
        return app

    async def _ready(self, _request: web.Request) -> web.Response:
        if self.ready:
            return web.json_response({"status": "ready"})
        return web.json_response({"status": "not_ready"}, status=503)

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.metrics.registry),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

    async def _snapshot(self, _request: web.Request) -> web.Response:
        snap = self.snapshot()
        overlay = self.overlay
        return web.json_response(
            {
                "revision": snap.revision,
                "mode": "overlay_file" if overlay is not None else "inline",
                "signals": self._signals_view(),
                "feedback": self._feedback_view(),
                "local_site": self.config.local_site,
                "candidates": [c.wire() for c in snap.candidates],
                "reloads": {
                    "accepted": overlay.accepted if overlay else 0,
                    "rejected": overlay.rejected if overlay else 0,
                    "last_rejection": overlay.last_rejection if overlay else None,
                },
            }
        )

    def _signals_view(self) -> dict[str, object] | None:
        """Poll-mode state for /snapshot: the document held and poll outcomes."""
        poller = self.signals
        if poller is None:
            return None
        document = poller.document
        return {
            "operator": poller.address,
            "epoch": document.epoch if document else None,
            "sequence": document.sequence if document else None,
            "providers": len(document.providers) if document else 0,
            "consecutive_failures": poller.failures,
            "polls": {k: v.value for k, v in poller.outcomes.items()},
        }

    def _feedback_view(self) -> dict[str, object] | None:
        """Poll-mode ingest feedback for /snapshot: the reporter's state."""
        if self.reports is None:
            return None
        r = self.reports.reporter
        acked = r.acknowledged
        return {
            "reporter": r.reporter_id,
            "epoch": r.epoch,
            "sequence": r.sequence,
            "rejected": r.rejected,
            "pending": r.pending is not None,
            "acknowledged_sequence": acked.sequence if acked is not None else None,
            "consecutive_failures": r.failures,
            "held": self.reports.held,
        }

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> tuple[str, str]:
        """Serve both listeners; returns (public address, admin address)."""
        admin = format_address(*await self.admin.start(*parse_address(self.config.admin)))
        try:
            public = format_address(*await self.public.start(*parse_address(self.config.listen)))
        except OSError:
            await self.admin.stop()
            raise
        self._watch = asyncio.create_task(self._watch_files(), name="grid-gateway-files")
        if self.signals is not None:
            self._poll = asyncio.create_task(self.signals.run(), name="grid-gateway-signals")
        if self.reports is not None:
            if self.overlay is not None:
                self._report("overlay", True)  # the cold-start load verified
            self._deliver = asyncio.create_task(
                self.reports.reporter.run(), name="grid-gateway-feedback"
            )
        self.ready = True
        log.info("gateway serving", extra={"public": public, "admin": admin})
        return public, admin

    async def _watch_files(self) -> None:
        while True:
            await asyncio.sleep(self.settings.overlay_poll_interval_s)
            self._reload_clusters()
            self.client_auth.poll()
            if self.meter.poll():
                log.info("budget view reloaded", extra={"exhausted": len(self.meter.exhausted)})
            if self.overlay is not None:
                self._poll_overlay(self.overlay)

    def _reload_clusters(self) -> None:
        """Take up the clusters and credentials of a changed praxis.yaml.

        The operator rewrites the file when a cluster joins the overlay. Listener,
        admin and route settings need a restart; clusters and credentials apply
        at once. A file that does not load changes nothing.
        """
        stamp = file_stamp(self.config_path)
        if self.config_path is None or stamp == self._config_stamp:
            return
        self._config_stamp = stamp
        try:
            fresh = load_config(self.config_path, self.settings.config_max_bytes)
        except ConfigError as exc:
            log.warning("praxis.yaml changed but does not load; keeping the running one",
                        extra={"error": str(exc)})  # fmt: skip
            return
        added = [name for name in fresh.clusters if name not in self.upstreams]
        for name in added:
            self.upstreams[name] = Upstream(fresh.clusters[name], self.settings)
            self.metrics.add_cluster(name)
        self.proxy.config = replace(
            self.proxy.config, clusters=fresh.clusters, credentials=fresh.credentials
        )
        log.info("praxis.yaml clusters reloaded", extra={"added": len(added)})

    def _poll_overlay(self, overlay: OverlayFile) -> None:
        accepted, rejected = overlay.accepted, overlay.rejected
        if overlay.poll():
            self.metrics.reloads["accepted"].inc()
            self.proxy.router.swapped(overlay.snapshot)
            revision = (overlay.snapshot.revision or "")[:12]
            log.info("overlay swapped", extra={"revision": revision})
        elif overlay.rejected > rejected:
            self.metrics.reloads["rejected"].inc()
        # Every reload is an ingest, whether or not it changed the snapshot.
        if overlay.rejected > rejected:
            self._report("overlay", False)
        elif overlay.accepted > accepted:
            self._report("overlay", True)

    async def stop(self) -> None:
        """Refuse new connections, drain in-flight requests (bounded), close clusters."""
        self.ready = False
        for task in (self._watch, self._poll, self._deliver):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.signals is not None:
            await self.signals.close()
        if self._ingest is not None:
            await self._ingest.close()
        await self.public.stop()
        await self.admin.stop()
        for upstream in self.upstreams.values():
            await upstream.close()
        try:
            self.meter.save()
        except OSError as exc:
            log.warning("cannot save the tenant counters", extra={"error": exc.strerror})
