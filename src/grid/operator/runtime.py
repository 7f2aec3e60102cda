"""The site operator: one process, one GridNetwork, one site.

`Operator.run` wires the tasks ARCHITECTURE.md lists around one event loop:

* the SWIM node (`grid.adapters.swim_node`), which owns the membership machine
  and the CRDT replica; its events mark the view dirty;
* the InferenceProvider controller (health checks and scrapes of own
  providers), whose records go into the local snapshot and out over SWIM;
* the GridSite controller (SWIM view plus mTLS egress probes);
* the renderer (`grid.operator.overlay_loop`): ``render_settle_s`` after something
  changed (or every ``render_interval_s`` for time-driven rules) it renders each gateway
  this site serves and writes the overlay only when its revision changed; then
  the GridNetwork status (`grid.operator.network`, which also initialises the
  network at start and converges the gridId);
* the budget loop (`grid.operator.budgets`), with ``--gateway-metrics``: it
  prices the local gateways' tenant tokens into this site's spend slot;
* the signal transport fixed at start (`grid.operator.lifecycle`): under
  gossip the records carry their signals over SWIM and the signals listener is
  never bound; under poll the operator serves its own signals on the mTLS
  listener, polls every alive peer, renders from what it pulled with local
  scoring off, and publishes records without signal values. A declared mode
  other than the running one, or a peer-trust change under poll, stops the
  process with one clear line so its supervisor restarts it;
* certificate rotation, which follows the declared trust on every check;
* the metrics/health endpoint.

SIGTERM leaves the SWIM mesh first, then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time

from opentelemetry import trace
from prometheus_client import CollectorRegistry, Gauge, Histogram

from grid.adapters.egress_listener import EgressListener
from grid.adapters.health_server import HealthServer
from grid.adapters.store.kubernetes import KubernetesStore
from grid.adapters.store.port import Expired, ResourceStore
from grid.adapters.store.url import pod_namespace
from grid.adapters.swim_metrics import SwimCollector
from grid.adapters.swim_node import SwimNode
from grid.adapters.tls_probe import client_context, server_context
from grid.adapters.tracing import outcome_span
from grid.core.address import parse_address
from grid.core.crdt.origin import AuthLimits
from grid.core.crdt.record import ProviderRecord
from grid.core.crdt.replica import GridState
from grid.core.resources import GridNetwork
from grid.core.resources.discovery import as_member
from grid.core.resources.secret import Secret
from grid.core.routing.mesh_view import OriginRecord
from grid.core.routing.signals import SignalsDocument
from grid.core.swim.effects import Deliver, Notify
from grid.operator.budgets import BudgetLoop, BudgetMeter
from grid.operator.discovery import SiteDiscovery
from grid.operator.feedback_ingest import wire_feedback
from grid.operator.feedback_writer import FeedbackWriter
from grid.operator.gateway_scrape import GatewayScrape
from grid.operator.integrity import ItemCounters, origin_auth, read_ca, trust_for
from grid.operator.ledger_store import LedgerStore
from grid.operator.lifecycle import SignalLifecycle
from grid.operator.live import OperatorLiveView
from grid.operator.local_lanes import LanePublisher
from grid.operator.network import ServedNetwork
from grid.operator.output import OverlayWriter
from grid.operator.overlay_loop import OverlayLoop, render_rounds
from grid.operator.own_providers import HOSTED_KINDS, WATCHED_KINDS, OwnProviders
from grid.operator.providers import ProviderController
from grid.operator.resilience import (
    RoundFailures,
    Supervisor,
    WriteGuard,
    WriteSite,
    retried_at_start,
)
from grid.operator.round_gate import RoundGate, round_key, round_outcome, settled, trust_deadline
from grid.operator.settings import OperatorSettings
from grid.operator.site_pki import SitePki, with_site_pki
from grid.operator.site_rounds import SiteRounds
from grid.operator.sites import SiteController, SiteMetrics
from grid.operator.startup import StartupError, select_network
from grid.operator.state_metrics import state_collector
from grid.operator.swim_keys import SwimKeys, swim_config, tuning_change
from grid.operator.trust_refresh import refresh_trust
from grid.operator.watched_store import WatchedStore, read_models

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

RENDER_SPAN = "grid.render_round"
"""The span of one render round; `grid.operator.overlay_loop` adds what it rendered."""
RECONCILE_LOOPS = ("sites", "render")
"""The loops whose round durations are exported (a closed label set)."""
RECONCILE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Histogram buckets of a round, in seconds: a quiet round takes milliseconds; a
round that waits on probe timeouts takes seconds."""


class Operator:
    """One site's operator; `run` until `stop` is called or a task fails."""

    def __init__(
        self, settings: OperatorSettings, store: ResourceStore, pki: SitePki | None = None
    ) -> None:
        self.settings = settings
        self.store = store = WatchedStore(store)
        self.pki = pki
        self.registry = CollectorRegistry()
        self.members_gauge = Gauge(
            "grid_swim_members", "SWIM members by state.", ["state"], registry=self.registry
        )
        self.reconcile_seconds = Histogram(
            "grid_reconcile_duration_seconds",
            "Duration of one reconcile round, by loop.",
            ["loop"],
            registry=self.registry,
            buckets=RECONCILE_BUCKETS_S,
        )
        for loop_name in RECONCILE_LOOPS:
            self.reconcile_seconds.labels(loop_name)
        self.registry.register(
            SwimCollector(
                lambda: (self.swim.counters if self.swim else None, self.replica.counters)
            )
        )
        self.health = HealthServer(self.registry, ready=lambda: self.ready)
        self.ready = False
        self.guard = WriteGuard(self.registry)
        if isinstance(store.inner, KubernetesStore):
            store.inner.event_failed = lambda exc: self.guard.count(WriteSite.EVENT, exc)
        self.failures = RoundFailures(self.registry)
        self.supervisor = Supervisor(self.failures)
        self.served = ServedNetwork(store, settings.site, self.guard)
        self.swim: SwimNode | None = None
        self._ca_pem = read_ca(settings.ca)
        self.replica = GridState(
            settings.site,
            base_revision=int(time.time() * 1000),
            auth=origin_auth(
                settings.ca, settings.key, AuthLimits(pending_items_max=settings.pending_items_max)
            ),
        )
        ItemCounters(self.replica, self.registry)
        self.writer = OverlayWriter(store, settings.overlay_dir, self.guard)
        self.overlays = OverlayLoop(settings.site, self.writer, self.registry)
        self.gate = RoundGate(self.registry)
        self.gateways = GatewayScrape(
            list(settings.gateway_metrics), settings.budget_scrape_timeout_s, self._declared
        )
        self.budget_meter = BudgetMeter(
            settings.site,
            LedgerStore(
                store,
                settings.site,
                pod_namespace(),
                settings.state_dir or settings.overlay_dir,
                self.guard,
            ),
        )
        self._dirty, self._stop = asyncio.Event(), asyncio.Event()
        self._round_lock = asyncio.Lock()
        self._egress: EgressListener | None = None
        self._swim_started_from: GridNetwork | None = None
        """The network whose ``spec.swim`` and ``spec.seeds`` the SWIM node runs with."""
        self.addresses: dict[str, str] = {}
        self.providers = ProviderController(
            store, settings.site, self._on_record, settings.record_refresh_s, guard=self.guard
        )
        self.own = OwnProviders(store, settings.site, self.served, self.providers, self._dirty.set)
        self.signals = SignalLifecycle(settings, store, self.registry)
        self.feedback: FeedbackWriter | None = None
        tls = None
        if settings.ca and settings.cert and settings.key:
            tls = client_context(settings.ca, settings.cert, settings.key)
            self.signals.tls_contexts.append(tls)
        self.sites = SiteController(
            store, settings.site, tls, metrics=SiteMetrics(self.registry), guard=self.guard
        )
        self.registry.register(state_collector(self.sites, self.served, self.overlays))
        self.site_rounds = SiteRounds(
            self.served,
            lambda: self.swim,
            self.replica,
            self.sites,
            SiteDiscovery(store, settings.site),
            interval_s=settings.site_probe_interval_s,
            members_gauge=self.members_gauge,
            durations=self.reconcile_seconds,
            changed=self._dirty.set,
            failures=self.failures,
        )
        self.lanes = LanePublisher(
            settings.site,
            settings.cert,
            store,
            self.served,
            self.signals,
            lambda: self.swim,
            retry=self._dirty.set,
        )
        self.swim_keys = SwimKeys(store, settings.swim_key_file, settings.swim_encrypt_key)
        self.live = OperatorLiveView(
            settings.site,
            self.replica,
            lambda: self.swim,
            lambda: self.served.network,
            self.gateways.traffic,
            self.gateways.recent_selections,
        )
        self.live.mount(self.health, settings.metrics_bind, settings.ui_public)
        self.budget_loop = BudgetLoop(
            self.gateways,
            self.budget_meter,
            self.replica,
            self.lanes.write,
            interval_s=settings.budget_scrape_interval_s,
            traffic_changed=self.live.changes.notify,
            spend_changed=self._dirty.set,
            failures=self.failures,
        )

    @classmethod
    async def prepared(cls, settings: OperatorSettings, store: ResourceStore) -> Operator:
        """An operator whose missing ``--ca``/``--cert``/``--key`` come from the network's
        ``caSecretRef``/``siteSecretRef`` Secrets, read through the store (`site_pki`)."""
        settings, pki = await with_site_pki(settings, store)
        return cls(settings, store, pki)

    # -- lifecycle -----------------------------------------------------------

    async def run(self) -> None:
        """Start everything, serve until stopped, then shut down gracefully."""
        network = await retried_at_start(self._network_at_start, self.failures, self._stop)
        if self.signals.transport is not None:
            server = self.signals.transport.server
            self.feedback = wire_feedback(
                server, self.store, network.name, self.registry, self.settings
            )
        await retried_at_start(self.budget_meter.load, self.failures, self._stop)
        await self._start_endpoints()
        await self._start_swim(network)
        await self.providers.start()
        tasks = self.supervisor
        for kind in WATCHED_KINDS:
            tasks.start(f"watch-{kind}", lambda kind=kind: self._watch(kind))  # type: ignore[misc]
        tasks.start("swim-events", self._events)
        tasks.start("sites", self.site_rounds.run)
        paced = settled(self._render_round, self.settings.render_settle_s)
        interval, gap = self.settings.render_interval_s, self.settings.render_gap_s
        tasks.start(
            "render", lambda: render_rounds(self._dirty, interval, paced, self.failures, gap)
        )
        network_now = lambda: self.served.network  # noqa: E731
        tasks.start(
            "cert-rotation",
            lambda: self.signals.rotation_loop(network_now, self.lanes.publish_rotated),
        )
        transport = self.signals.transport
        if transport is not None:
            tasks.start("signals-poll", lambda: transport.run(self._poll_targets, self._dirty.set))
        # Always run: a GridNetwork edit may declare a gateway's adminUrl at any time.
        tasks.start("budgets", self.budget_loop.run)
        await self.own.sync()
        # A failed task starts again; only a deliberate exit (StartupError) ends the run.
        ended = await tasks.run(self._stop)
        await self._shutdown()
        if ended is not None:
            raise ended

    async def _network_at_start(self) -> GridNetwork:
        network = await select_network(self.store, self.settings.network)
        network = await self.served.initialize(network)
        await self._refresh_trust()
        self.served.mode = await self.signals.fix(network, int(time.time()))
        return network

    def stop(self) -> None:
        """Ask `run` to shut down gracefully (leave the mesh first)."""
        self._stop.set()

    async def _shutdown(self) -> None:
        self.ready = False
        if self.swim is not None:
            try:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(self.settings.shutdown_timeout_s):
                        await self.swim.leave()
            finally:
                await self.swim.stop()
        pending = set(self.supervisor.tasks.values())
        while pending:
            # Re-sent each second: a cancellation some library swallowed is not the end.
            for task in pending:
                task.cancel()
            _done, pending = await asyncio.wait(pending, timeout=1.0)
        for task in self.supervisor.tasks.values():
            if not task.cancelled():
                task.exception()  # retrieved: the failure that ended the run is raised by run()
        await self.own.stop()
        if self._egress is not None:
            await self._egress.stop()
        if self.signals.transport is not None:
            await self.signals.transport.stop()
        await self.health.stop()
        if self.pki is not None:
            self.pki.close()
        log.info("operator stopped", extra={"site": self.settings.site})

    async def _start_endpoints(self) -> None:
        host, port = parse_address(self.settings.metrics_bind)
        bound = await self.health.start(host, port)
        self.addresses["metrics"] = f"{bound[0]}:{bound[1]}"
        s = self.settings
        transport = self.signals.transport
        if transport is not None:
            self.addresses["signals"] = await transport.start(s.signals_bind)
            log.info("signals listener bound", extra={"signals": self.addresses["signals"]})
        if s.egress_bind and s.ca and s.cert and s.key:
            egress_context = server_context(s.ca, s.cert, s.key)
            self.signals.tls_contexts.append(egress_context)
            self._egress = EgressListener(egress_context)
            host, port = parse_address(s.egress_bind)
            e_host, e_port = await self._egress.start(host, port)
            self.addresses["egress"] = f"{e_host}:{e_port}"

    async def _start_swim(self, network: GridNetwork) -> None:
        self._swim_started_from = network
        keyring = await self.swim_keys.load(network)
        self.swim = await SwimNode.start(
            self.settings.site,
            self.settings.swim_bind,
            keyring,
            config=swim_config(network, self.settings.swim_dead_retention_s),
            seeds=list(dict.fromkeys([*network.spec.seeds, *self.settings.swim_seeds])),
            advertise=self.settings.swim_advertise,
            replica=self.replica,
        )
        self.addresses["swim"] = self.swim.address
        log.info("joined mesh", extra={"site": self.settings.site, "swim": self.swim.address})
        await self.lanes.publish_site_lanes()
        # The persisted slot goes out before anything else is counted.
        await self.lanes.write(self.budget_meter.publish)

    # -- inputs ----------------------------------------------------------------

    def _on_record(self, provider: str, record: ProviderRecord | None) -> None:
        self.lanes.on_record(provider, record)
        self.gate.providers_epoch += 1
        self._dirty.set()

    async def _refresh_trust(self) -> None:
        """Re-read which certificates may speak for which site (`refresh_trust`)."""
        trust = trust_for(self._ca_pem, self.served.network, await self.served.sites())
        await refresh_trust(self.replica, trust, self.swim)

    async def _watch(self, kind: str) -> None:
        """Follow one kind's changes; after `Expired`, start over from a fresh list."""
        while True:
            try:
                async for event in self.store.watch(kind):
                    if kind in HOSTED_KINDS:
                        await self.own.sync()
                    elif kind == "GridNetwork":
                        before = self.lanes.geography()
                        self.served.on_event(event.type, event.object)
                        self._check_tuning()
                        if self.pki is not None:  # a GridNetwork naming other Secrets restarts
                            await self.pki.check(self.store, self.served.network)
                        await self._refresh_trust()
                        await self.signals.judge(self.served.network)
                        await self.lanes.republish_if_moved(before)
                    elif kind == "Secret":
                        await self._reload_keys()
                        if self.pki is not None:
                            await self.pki.check(self.store, self.served.network, event.object)
                    elif kind == "GridSite":
                        await self._refresh_trust()
                        await self.signals.judge(self.served.network)
                        # A GridSite's labels decide which providers a siteSelector hosts here.
                        await self.own.sync()
                        if event.object["metadata"]["name"] == self.settings.site:
                            await self.lanes.publish_site_lanes()
                    self.gate.store_event(kind, event.object)
                    self._dirty.set()
                return
            except Expired:
                log.info("watch expired; listing again", extra={"kind": kind})

    def _declared(self) -> list[str]:
        """The ``/metrics`` URLs the served network declares for this site's gateways."""
        network = self.served.network
        return [] if network is None else network.spec.gateway_metrics_urls(self.settings.site)

    def _check_tuning(self) -> None:
        """Stop for a clean restart when ``spec.swim`` or ``spec.seeds`` changed.

        The comparison is with the network the SWIM node was started from, not
        with the previous event's: a status write between the edit and its watch
        event may already have taken the edited spec up into ``served.network``.
        """
        changed = tuning_change(self._swim_started_from, self.served.network)
        if changed is not None:
            raise StartupError(f"GridNetwork {changed} changed; restarting to apply it")

    async def _reload_keys(self) -> None:
        """Install the swimKeyRef Secret's keyring when it changed (no restart)."""
        network = self.served.network
        if self.swim is None or network is None:
            return
        keyring = await self.swim_keys.reload(network, self.swim.keyring)
        if keyring is not None:
            self.swim.set_keyring(keyring)

    async def _events(self) -> None:
        assert self.swim is not None
        while True:
            event = await self.swim.events.get()
            self.live.on_swim_event(event)
            if isinstance(event, Notify | Deliver):
                self._dirty.set()

    def _poll_targets(self) -> dict[str, str]:
        """Every alive member at its SWIM host and advertised signals port."""
        if self.swim is None:
            return {}
        return self.signals.poll_targets(self.swim.members(), self.replica)

    # -- loops -------------------------------------------------------------------

    async def _render_round(self) -> None:
        # Rounds never overlap, whoever starts one: two would race on the same writes.
        async with self._round_lock:
            await self.lanes.publish_records(self.own.agents.offers)
            if self.gate.unchanged(round_key(self), time.time()):
                return
            started = time.monotonic()
            with (
                outcome_span(_tracer, RENDER_SPAN, {"grid.site": self.settings.site}) as span,
                self.reconcile_seconds.labels("render").time(),
            ):
                await self.reconcile_overlays()
                span.set_attribute("grid.render.duration_ms", (time.monotonic() - started) * 1e3)

    async def reconcile_overlays(self) -> None:
        """Render every gateway this site serves; write changed overlays and status.

        A round that sees nothing changed since the last one does nothing (`RoundGate`)."""
        key = round_key(self)
        if self.gate.unchanged(key, time.time()):
            return
        network = self.served.network
        assert network is not None
        sites = await self.served.sites()
        secrets = await read_models(self.store, "Secret", Secret)
        own, agents = await self.own.routable()
        if await self.served.converge_grid_id(network, self.replica):
            await self.lanes.publish_site_lanes()
        view = None
        if self.signals.transport is not None:
            records = dict(self.lanes.records)

            def view(
                live: list[OriginRecord], now: dt.datetime, ttl: float | None
            ) -> SignalsDocument:
                return self.signals.signals_view(live, records, now, ttl)

        overlays = await self.overlays.render(
            network,
            [as_member(s) for s in sites],
            own,
            secrets,
            self.replica,
            self.sites.phases,
            view,
            agents,
        )
        self.ready = True
        self.live.on_render(
            self.overlays.last_inputs, self.overlays.last_signals, self.overlays.last_held
        )
        unread = [*self.providers.unresolved_secrets(), *filter(None, [self.swim_keys.unreadable])]
        modes = (self.served.mode or "", self.signals.mode_mismatch(self.replica))
        self.live.on_modes(*modes)
        await self.served.write_status(
            network.name,
            overlays,
            self.sites.phases,
            round_outcome(self.overlays, unread, self.budget_meter.save_failing, modes),
            self.overlays.consumer_status,
            self.overlays.budget_status,
            self.overlays.overlay_status,
        )
        deadline = min(self.overlays.deadline, trust_deadline(self.replica, time.time()))
        self.gate.rendered(key if self.overlays.settled else None, deadline)
