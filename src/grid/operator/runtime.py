"""The site operator: one process, one GridNetwork, one site.

`Operator.run` wires the tasks ARCHITECTURE.md lists around one event loop:

* the SWIM node (`grid.adapters.swim_node`), which owns the membership machine
  and the CRDT replica; its events mark the view dirty;
* the InferenceProvider controller (health checks and scrapes of own
  providers), whose records go into the local snapshot and out over SWIM;
* the GridSite controller (SWIM view plus mTLS egress probes);
* the renderer: whenever something changed (or every ``render_interval_s`` for
  time-driven rules) it renders each gateway this site serves and writes the
  overlay only when its revision changed; then the GridNetwork status;
* the metrics/health endpoint.

The signal transport is read once, at start (seed 000). Under gossip the
records carry their signals over SWIM and the signals listener is never bound.
Under poll (`grid.operator.signals`) the operator serves its own signals on the
mTLS listener, polls every alive peer, renders from what it pulled with local
scoring off, and publishes records without signal values. A declared mode
other than the running one, or a peer-trust change under poll, stops the
process with one clear line so its supervisor restarts it
(`grid.core.signal_mode`). Certificate rotation follows the declared trust on
every check. SIGTERM leaves the SWIM mesh first, then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import hashlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from grid.adapters.health_server import ClosedCounter, HealthServer
from grid.adapters.store.port import EventType, Expired, ResourceStore
from grid.adapters.swim_node import SwimNode
from grid.adapters.tls_probe import EgressListener, client_context, server_context
from grid.adapters.udp import parse_address
from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import (
    CertLaneValue,
    GatewayLaneValue,
    GridStateSnapshot,
    Lane,
    MetadataLaneValue,
    sorted_pairs,
)
from grid.core.resources import GridNetwork, GridSite, InferenceProvider
from grid.core.resources.duration import parse_duration
from grid.core.resources.lifecycle import next_network_phase
from grid.core.resources.phases import NetworkPhase, SitePhase
from grid.core.resources.secret import Secret
from grid.core.routing.mesh_view import (
    GRID_ID_LABEL,
    OriginRecord,
    converged_grid_id,
    live_records,
    mesh_inputs,
    signals_document,
    signals_entry,
)
from grid.core.routing.render import render
from grid.core.routing.signals import SignalsDocument
from grid.core.signal_mode import Mode, Running, judge, rotates
from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import Deliver, Notify
from grid.core.swim.members import MemberState
from grid.core.trust import TrustPolicy, public_chain_pem
from grid.core.wire.keyring import Keyring
from grid.errors import GridError, NotFound, ValidationError
from grid.operator.feedback_ingest import wire_ingest
from grid.operator.feedback_writer import FeedbackSettings, FeedbackWriter
from grid.operator.output import OverlayWriter, configmap_name
from grid.operator.providers import ProviderController
from grid.operator.settings import OperatorSettings
from grid.operator.signals import (
    SIGNALS_PORT_LABEL,
    PollTransport,
    leaf_der,
    poll_targets,
    trust_of,
)
from grid.operator.sites import SiteController
from grid.operator.startup import (
    StartupError,
    new_grid_id,
    select_network,
    swim_key,
)

log = logging.getLogger(__name__)


class Operator:
    """One site's operator; `run` until `stop` is called or a task fails."""

    def __init__(self, settings: OperatorSettings, store: ResourceStore) -> None:
        self.settings = settings
        self.store = store
        self.registry = CollectorRegistry()
        self.renders = ClosedCounter(
            "grid_overlay_renders_total",
            "Overlay renders by outcome.",
            "result",
            ("written", "unchanged", "failed"),
            self.registry,
        )
        self.members_gauge = Gauge(
            "grid_swim_members", "SWIM members by state.", ["state"], registry=self.registry
        )
        self.cert_rotations = Counter(
            "grid_cert_rotations",
            "Reloads of the site certificate after its files changed (spiffe trust only).",
            registry=self.registry,
        )
        self.health = HealthServer(self.registry, ready=lambda: self.ready)
        self.ready = False
        self.network: GridNetwork | None = None
        self.swim: SwimNode | None = None
        self.replica = GridState(settings.site, base_revision=int(time.time() * 1000))
        self.writer = OverlayWriter(store, settings.overlay_dir)
        self._dirty = asyncio.Event()
        self._local_lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._records: dict[str, ProviderRecord | None] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._egress: EgressListener | None = None
        self._sequence = 0
        self._epoch = int(time.time())
        self._unreachable = 0
        self.addresses: dict[str, str] = {}
        self.grid_id = ""
        self.providers = ProviderController(
            store, settings.site, self._on_record, settings.record_refresh_s
        )
        self.running: Running | None = None
        self.transport: PollTransport | None = None
        self.feedback: FeedbackWriter | None = None
        self._tls_contexts: list[ssl.SSLContext] = []
        self._cert_digest = self._read_cert_digest()
        self.rotation_checks = 0
        tls = None
        if settings.ca and settings.cert and settings.key:
            tls = client_context(settings.ca, settings.cert, settings.key)
            self._tls_contexts.append(tls)
        self.sites = SiteController(store, settings.site, tls)

    # -- lifecycle -----------------------------------------------------------

    async def run(self) -> None:
        """Start everything, serve until stopped, then shut down gracefully."""
        network = await select_network(self.store, self.settings.network)
        self.network = await self._initialize(network)
        await self._fix_mode(self.network)
        await self._start_endpoints()
        await self._start_swim(self.network)
        await self.providers.start()
        self._tasks = [
            asyncio.create_task(self._watch(kind), name=f"watch-{kind}")
            for kind in ("GridNetwork", "GridSite", "InferenceProvider")
        ]
        self._tasks += [
            asyncio.create_task(self._events(), name="swim-events"),
            asyncio.create_task(self._site_loop(), name="sites"),
            asyncio.create_task(self._render_loop(), name="render"),
            asyncio.create_task(self._rotation_loop(), name="cert-rotation"),
        ]
        if self.transport is not None:
            self._tasks.append(
                asyncio.create_task(
                    self.transport.run(self._poll_targets, self._dirty.set), name="signals-poll"
                )
            )
        await self._sync_providers()
        stop = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait([stop, *self._tasks], return_when=asyncio.FIRST_COMPLETED)
        failed = [
            t for t in done if t is not stop and not t.cancelled() and t.exception() is not None
        ]
        await self._shutdown()
        if failed:
            raise failed[0].exception()  # type: ignore[misc]

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
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.providers.stop()
        if self._egress is not None:
            await self._egress.stop()
        if self.transport is not None:
            await self.transport.stop()
        await self.health.stop()
        log.info("operator stopped", extra={"site": self.settings.site})

    async def _initialize(self, network: GridNetwork) -> GridNetwork:
        """Persist a gridId on first join and move Pending -> Initializing."""
        status = network.status
        patch: dict[str, Any] = {}
        if network.spec.grid_id and (status is None or status.grid_id != network.spec.grid_id):
            patch["gridId"] = network.spec.grid_id
        elif status is None or not status.grid_id:
            patch["gridId"] = new_grid_id()
        phase = next_network_phase(network.phase, started=True, rendered=False, unreachable_sites=0)
        if phase is not network.phase:
            patch.update(phase=phase.value, reason="Starting")
        if patch:
            patch["observedGeneration"] = network.metadata.generation
            obj = await self.store.patch_status("GridNetwork", network.name, patch)
            network = GridNetwork.model_validate(obj)
        assert network.status is not None and network.status.grid_id
        self.grid_id = network.status.grid_id
        log.info(
            "serving network",
            extra={"network": network.name, "grid_id": network.status and network.status.grid_id},
        )
        return network

    async def _start_endpoints(self) -> None:
        host, port = parse_address(self.settings.metrics_bind)
        bound = await self.health.start(host, port)
        self.addresses["metrics"] = f"{bound[0]}:{bound[1]}"
        s = self.settings
        if self.transport is not None:
            self.addresses["signals"] = await self.transport.start(s.signals_bind)
            log.info("signals listener bound", extra={"signals": self.addresses["signals"]})
        if s.egress_bind and s.ca and s.cert and s.key:
            egress_ctx = server_context(s.ca, s.cert, s.key)
            self._tls_contexts.append(egress_ctx)
            self._egress = EgressListener(egress_ctx)
            host, port = parse_address(s.egress_bind)
            e_host, e_port = await self._egress.start(host, port)
            self.addresses["egress"] = f"{e_host}:{e_port}"

    # -- the signal transport, fixed at start -----------------------------------

    async def _fix_mode(self, network: GridNetwork) -> None:
        """Read the mode once; under poll, build the transport with the declared trust."""
        mode: Mode = network.spec.signal_mode
        if mode == "gossip":
            self.running = Running(network.name, mode)
            return
        s = self.settings
        if not (s.ca and s.cert and s.key):
            raise StartupError("signalTransport.mode: poll needs --ca, --cert and --key")
        trust = await self._declared_trust(network)
        assert trust is not None
        self.running = Running(network.name, mode, trust)
        self.transport = PollTransport(
            network.name,
            s.site,
            epoch=self._epoch,
            now=dt.datetime.now(dt.UTC),
            trust=trust,
            tls_files=(s.ca, s.cert, s.key),
            registry=self.registry,
            poll_interval_s=s.signals_poll_interval_s,
        )
        self._tls_contexts += [self.transport.server.ssl_context, self.transport.poller.ssl_context]
        self._wire_feedback(network)
        log.info("signal transport fixed", extra={"mode": mode})

    def _wire_feedback(self, network: GridNetwork) -> None:
        """Add the ingest route to the signals listener: the single writer, or 405 when off."""
        assert self.transport is not None
        s = self.settings
        settings = None
        if s.ingest_feedback:
            settings = FeedbackSettings(
                reporter_capacity=s.feedback_reporter_capacity,
                write_attempts=s.feedback_write_attempts,
            )
        _events, self.feedback = wire_ingest(
            self.transport.server, self.store, network.name, self.registry, settings
        )

    async def _declared_trust(self, network: GridNetwork | None) -> TrustPolicy | None:
        """The trust the store declares now, or None without a site certificate."""
        if network is None or self.settings.cert is None:
            return None
        sites = [GridSite.model_validate(o) for o in await self.store.list("GridSite")]
        return trust_of(network, sites, self.settings.site, leaf_der(self.settings.cert))

    async def _judge_declared(self, network: GridNetwork | None) -> None:
        """Exit (for a restart) when the declaration no longer matches what runs."""
        if network is None or self.running is None:
            return
        trust = await self._declared_trust(network) if self.running.mode == "poll" else None
        verdict = judge(self.running, network.spec.signal_mode, trust)
        if verdict is not None:
            raise StartupError(verdict)

    def _lane_labels(self) -> dict[str, str]:
        """Metadata-lane labels: the gridId, and the signals port when one is bound."""
        labels = {GRID_ID_LABEL: self.grid_id}
        if self.transport is not None and self.transport.server.address is not None:
            labels[SIGNALS_PORT_LABEL] = str(self.transport.server.address[1])
        return labels

    def _poll_targets(self) -> dict[str, str]:
        """Every alive member at its SWIM host and its advertised signals port."""
        if self.swim is None:
            return {}
        ports = {}
        for origin in self.replica.origins():
            snapshot = self.replica.snapshot(origin)
            port = dict(snapshot.metadata.labels).get(SIGNALS_PORT_LABEL) if snapshot else None
            if port is not None and port.isdigit():
                ports[origin] = int(port)
        return poll_targets(self.swim.members(), self.settings.site, ports)

    def _read_cert_digest(self) -> str:
        s = self.settings
        digest = hashlib.sha256()
        for path in (s.cert, s.key):
            if path is not None:
                with contextlib.suppress(OSError):
                    digest.update(path.read_bytes())
        return digest.hexdigest()

    async def _rotation_loop(self) -> None:
        """Reload the site certificate when its files change, if declared trust rotates.

        The declared trust is read on every check (seed 000): under spiffe the
        mounted SVID files are re-read when they change; under pin nothing is,
        so a switch to pin stops rotation without a restart (under poll that
        switch is a trust change, which restarts the process instead).
        """
        while True:
            await asyncio.sleep(self.settings.cert_check_interval_s)
            self.rotation_checks += 1
            network = self.network
            tls = network.spec.tls if network is not None else None
            if not rotates(tls.trust.mode if tls is not None else "pin"):
                continue
            digest = self._read_cert_digest()
            if digest == self._cert_digest:
                continue
            s = self.settings
            assert s.cert is not None and s.key is not None
            try:
                for context in self._tls_contexts:
                    context.load_cert_chain(str(s.cert), str(s.key))
            except (OSError, ssl.SSLError, ValueError):
                log.warning("rotated certificate unreadable; keeping the current one")
                continue
            self._cert_digest = digest
            self.cert_rotations.inc()
            log.info("site certificate reloaded")
            await self._publish_site_lanes()

    async def _start_swim(self, network: GridNetwork) -> None:
        key = await swim_key(self.store, network, self.settings.swim_key_file)
        swim = network.spec.swim
        interval_s = parse_duration(swim.probe_interval)
        # A probe must time out within its round, so short intervals shrink it.
        config = SwimConfig(
            gossip_nodes=swim.gossip_nodes,
            probe_interval_s=interval_s,
            suspicion_timeout_s=parse_duration(swim.suspicion_timeout),
            probe_timeout_s=min(SwimConfig().probe_timeout_s, interval_s / 2),
        )
        self.swim = await SwimNode.start(
            self.settings.site,
            self.settings.swim_bind,
            Keyring(key),
            config=config,
            seeds=list(network.spec.seeds),
            advertise=self.settings.swim_advertise,
            replica=self.replica,
        )
        self.addresses["swim"] = self.swim.address
        log.info("joined mesh", extra={"site": self.settings.site, "swim": self.swim.address})
        await self._publish_site_lanes()

    # -- inputs ----------------------------------------------------------------

    def _on_record(self, provider: str, record: ProviderRecord | None) -> None:
        self._records[provider] = record
        self._dirty.set()

    async def _write_local(self, change: Callable[[GridStateSnapshot], GridStateSnapshot]) -> bool:
        """Apply ``change`` to our snapshot and disseminate it; True when published.

        Every local write goes through here under one lock, so two writers never
        build on the same revision. Should a write still race (the node re-asserted
        our lane meanwhile), it is dropped and retried on the next render round.
        """
        assert self.swim is not None
        async with self._local_lock:
            current = self.replica.local
            snap = change(current)
            if snap == current:
                return True
            try:
                await self.swim.publish_snapshot(snap)
            except ValidationError as exc:
                log.warning("local state write raced; retrying", extra={"code": exc.code})
                self._dirty.set()
                return False
            return True

    async def _publish_site_lanes(self) -> None:
        """Publish the metadata and gateway lanes from our GridSite, if any."""
        try:
            own = GridSite.model_validate(await self.store.get("GridSite", self.settings.site))
        except NotFound:
            return
        metadata = MetadataLaneValue(
            region=own.spec.region or "",
            zone=own.spec.zone or "",
            sovereignty_zone=own.spec.sovereignty_zone or "",
            labels=sorted_pairs({**own.metadata.labels, **self._lane_labels()}),
        )
        gateway = GatewayLaneValue(
            egress_address=own.spec.egress.address if own.spec.egress else ""
        )
        cert = CertLaneValue(pem=self._public_cert_pem())
        await self._write_local(
            lambda snap: (
                snap.set_lane(Lane.METADATA, metadata)
                .set_lane(Lane.GATEWAY, gateway)
                .set_lane(Lane.CERT, cert)
            )
        )

    def _public_cert_pem(self) -> str:
        """This site's public certificate chain for the cert lane ("" without --cert)."""
        if self.settings.cert is None:
            return ""
        try:
            return public_chain_pem(self.settings.cert.read_bytes())
        except (OSError, ValueError):
            log.warning("site certificate unreadable; cert lane left empty")
            return ""

    async def _publish_records(self) -> None:
        """Write changed own records into the local snapshot and disseminate them.

        Under poll the signal values travel by poll, not over SWIM, so the
        records published carry none.
        """
        records = dict(self._records)
        if self.transport is not None:
            records = {
                n: (None if r is None else dataclasses.replace(r, signals=RecordSignals()))
                for n, r in records.items()
            }

        def change(snap: GridStateSnapshot) -> GridStateSnapshot:
            held = snap.state.live_providers()
            for name, record in records.items():
                if record is None:
                    snap = snap.remove_provider(name)
                elif held.get(name) != record:
                    snap = snap.put_provider(name, record)
            return snap

        if await self._write_local(change):
            for name, record in records.items():
                if record is None and self._records.get(name) is None:
                    self._records.pop(name, None)

    async def _watch(self, kind: str) -> None:
        """Follow one kind's changes; after `Expired`, start over from a fresh list."""
        while True:
            try:
                async for event in self.store.watch(kind):
                    if kind == "InferenceProvider":
                        await self._sync_providers()
                    elif kind == "GridNetwork":
                        await self._on_network(event.type, event.object)
                    elif kind == "GridSite":
                        await self._judge_declared(self.network)
                        if event.object["metadata"]["name"] == self.settings.site:
                            await self._publish_site_lanes()
                    self._dirty.set()
                return
            except Expired:
                log.info("watch expired; listing again", extra={"kind": kind})

    async def _on_network(self, kind: EventType, obj: dict[str, Any]) -> None:
        """Track our network; exit (for a restart) when another appears or the mode changes.

        The mode is read once at start, so a declared change is a restart, not a
        live flip (seed 000); so is a second GridNetwork in the store, or the
        deletion of ours.
        """
        if kind is EventType.DELETED and obj["metadata"]["name"] == self._net_name:
            raise StartupError(f"GridNetwork {self._net_name!r} was deleted; stopping")
        if kind is EventType.DELETED:
            return
        if obj["metadata"]["name"] != self._net_name:
            other = GridNetwork.model_validate(obj)
            assert self.running is not None
            if other.spec.signal_mode != self.running.mode:
                raise StartupError(
                    f"GridNetwork {other.name!r} appeared declaring signalTransport.mode: "
                    f"{other.spec.signal_mode}, this process serves {self.running.mode}; "
                    "one operator serves one GridNetwork"
                )
            raise StartupError(
                f"a second GridNetwork {obj['metadata']['name']!r} appeared; "
                "one operator serves one GridNetwork"
            )
        network = GridNetwork.model_validate(obj)
        await self._judge_declared(network)
        self.network = network

    @property
    def _net_name(self) -> str:
        assert self.network is not None
        return self.network.name

    async def _own_providers(self) -> list[InferenceProvider]:
        providers = [
            InferenceProvider.model_validate(o) for o in await self.store.list("InferenceProvider")
        ]
        site = self.settings.site
        return [
            p
            for p in providers
            if p.spec.grid_network_ref == self._net_name and (p.site_label or site) == site
        ]

    async def _sync_providers(self) -> None:
        self.providers.sync(await self._own_providers())

    async def _events(self) -> None:
        assert self.swim is not None
        while True:
            event = await self.swim.events.get()
            if isinstance(event, Notify | Deliver):
                self._dirty.set()

    def member_states(self) -> dict[str, MemberState]:
        """SWIM's view of every member, by site name."""
        if self.swim is None:
            return {}
        return {m.id: m.state for m in self.swim.members()}

    # -- loops -------------------------------------------------------------------

    async def _site_loop(self) -> None:
        while True:
            sites = await self._sites()
            members = self.member_states()
            for state in MemberState:
                self.members_gauge.labels(state.value).set(
                    sum(1 for s in members.values() if s is state)
                )
            if await self.sites.reconcile(sites, members):
                self._dirty.set()
            self._unreachable = sum(
                1 for p in self.sites.phases.values() if p is SitePhase.UNREACHABLE
            )
            await asyncio.sleep(self.settings.site_probe_interval_s)

    async def _sites(self) -> list[GridSite]:
        sites = [GridSite.model_validate(o) for o in await self.store.list("GridSite")]
        return [s for s in sites if s.spec.grid_network_ref == self._net_name]

    async def _render_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.render_interval_s):
                    await self._dirty.wait()
            self._dirty.clear()
            await self._publish_records()
            await self.reconcile_overlays()

    async def reconcile_overlays(self) -> None:
        """Render every gateway this site serves; write changed overlays and status."""
        network = self.network
        assert network is not None
        now = dt.datetime.now(dt.UTC)
        sites = await self._sites()
        secrets = [Secret.model_validate(o) for o in await self.store.list("Secret")]
        own = [p for p in await self._own_providers() if p.name in self.providers.names]
        own = [
            self.providers.current(p.name) or p
            for p in own
            if self.providers.credentials_ok(p.name)
        ]
        ttl = network.spec.stale_candidate_ttl_seconds
        await self._converge_grid_id(network)
        trusted = {
            name
            for name, phase in self.sites.phases.items()
            if phase in (SitePhase.ACTIVE, SitePhase.UNREACHABLE)
        }
        records = live_records(
            (OriginRecord(o, pid, r) for o, pid, r in self.replica.providers()),
            self.settings.site,
            now.timestamp(),
            float(ttl) if ttl is not None else None,
            trusted,
        )
        inputs = mesh_inputs(network, sites, own, secrets, records, self.settings.site)
        signals = self._signals_view(network, records, now, ttl)
        overlays = []
        served = [
            ref
            for ref in network.spec.gateway_refs
            if (ref.local_site_name or self.settings.site) == self.settings.site
        ]
        self.writer.per_gateway = len(served) > 1
        for ref in served:
            try:
                rendered = render(
                    inputs,
                    site=self.settings.site,
                    gateway=ref.name,
                    namespace=ref.namespace,
                    signals=signals,
                    now=now,
                )
            except GridError as exc:
                self.renders.inc("failed")
                log.warning("render failed", extra={"gateway": ref.name, "code": exc.code})
                continue
            written = await self.writer.write(rendered)
            self.renders.inc("written" if written else "unchanged")
            if written:
                log.info(
                    "overlay written",
                    extra={
                        "gateway": ref.name,
                        "revision": rendered.envelope["revision"]["value"][:12],
                        "candidates": len(rendered.overlay["candidates"]),
                    },
                )
            overlays.append(
                {
                    "gateway": ref.name,
                    "namespace": rendered.scope.namespace,
                    "configMap": configmap_name(network.name, ref.name),
                    "revision": rendered.envelope["revision"]["value"],
                    "candidateCount": len(rendered.overlay["candidates"]),
                    "phase": "Rendered",
                }
            )
        self.ready = True
        await self._write_network_status(network, overlays)

    def _signals_view(
        self,
        network: GridNetwork,
        records: list[OriginRecord],
        now: dt.datetime,
        ttl: int | None,
    ) -> SignalsDocument:
        """The signals to render from: gossiped records, or under poll own plus pulled."""
        site = self.settings.site
        if self.transport is None:
            self._sequence += 1
            return signals_document(
                network.name, site, records, now=now, epoch=self._epoch, sequence=self._sequence
            )
        own = [
            signals_entry(self._records[r.record.name] or r.record)
            for r in records
            if r.origin == site and self._records.get(r.record.name) is not None
        ]
        return self.transport.refresh(own, now, float(ttl) if ttl is not None else None)

    async def _converge_grid_id(self, network: GridNetwork) -> None:
        """Adopt the grid's oldest gridId as peers gossip theirs (unless spec pins one)."""
        if network.spec.grid_id:
            return
        gossiped = []
        for origin in self.replica.origins():
            snapshot = self.replica.snapshot(origin)
            if snapshot is not None and origin != self.settings.site:
                gossiped.append(dict(snapshot.metadata.labels).get(GRID_ID_LABEL, ""))
        agreed = converged_grid_id(self.grid_id, gossiped)
        if agreed == self.grid_id:
            return
        log.info("adopting the grid's gridId", extra={"grid_id": agreed, "was": self.grid_id})
        self.grid_id = agreed
        await self.store.patch_status("GridNetwork", network.name, {"gridId": agreed})
        await self._publish_site_lanes()

    async def _write_network_status(
        self, network: GridNetwork, overlays: list[dict[str, Any]]
    ) -> None:
        fresh = GridNetwork.model_validate(await self.store.get("GridNetwork", network.name))
        status = fresh.status
        current = fresh.phase
        phase = next_network_phase(
            current, started=True, rendered=True, unreachable_sites=self._unreachable
        )
        connected = sum(1 for p in self.sites.phases.values() if p is SitePhase.ACTIVE)
        patch: dict[str, Any] = {}
        if phase is not current:
            patch.update(
                phase=phase.value,
                reason="SitesUnreachable" if phase is NetworkPhase.DEGRADED else "Rendered",
            )
        if status is None or status.connected_sites != connected:
            patch["connectedSites"] = connected
        old = [
            o.model_dump(by_alias=True, exclude_none=True)
            for o in (status.overlays if status else [])
        ]
        if old != overlays:
            patch["overlays"] = overlays
        if patch:
            patch["observedGeneration"] = fresh.metadata.generation
            obj = await self.store.patch_status("GridNetwork", network.name, patch)
            self.network = GridNetwork.model_validate(obj)
