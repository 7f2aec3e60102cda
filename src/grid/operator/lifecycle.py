"""The signal transport's lifecycle in one operator: fixed at start, judged on every change.

`SignalLifecycle` reads the mode once, when the operator starts (seed 000).
Under poll it builds the `grid.operator.signals.PollTransport` with the trust
declared at that moment. Afterwards every GridNetwork or GridSite change is
judged by `grid.core.signals.mode.judge`: a declared mode other than the running
one, or (under poll) a peer-trust change, raises `StartupError` with one clear
line, which ends the process so that its supervisor restarts it.

Certificate rotation lives here too, because it follows the declared trust:
`rotation_loop` checks the site's certificate files every
``cert_check_interval_s``, and only when the declared trust is spiffe does it
reload them into every TLS context the operator holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from grid.adapters.store.port import ResourceStore
from grid.core.crdt.record import ProviderRecord
from grid.core.crdt.replica import GridState
from grid.core.resources import GridNetwork, GridSite
from grid.core.resources.network_status import mismatched
from grid.core.routing.mesh_view import OriginRecord, signals_entry
from grid.core.routing.signals import SignalsDocument
from grid.core.signals.mode import Mode, Running, judge, rotates
from grid.core.swim.members import Member
from grid.core.trust import TrustPolicy
from grid.operator.settings import OperatorSettings
from grid.operator.signals import (
    SIGNALS_PORT_LABEL,
    PollTransport,
    leaf_der,
    poll_targets,
    trust_of,
)
from grid.operator.startup import StartupError

log = logging.getLogger(__name__)


class SignalLifecycle:
    """The running mode, the poll transport under poll, and certificate rotation."""

    def __init__(
        self, settings: OperatorSettings, store: ResourceStore, registry: CollectorRegistry
    ) -> None:
        self.settings = settings
        self.store = store
        self.registry = registry
        self.running: Running | None = None
        self.transport: PollTransport | None = None
        self.tls_contexts: list[ssl.SSLContext] = []
        """Every TLS context holding the site certificate, reloaded on rotation."""
        self.rotations = Counter(
            "grid_cert_rotations",
            "Reloads of the site certificate after its files changed (spiffe trust only).",
            registry=registry,
        )
        self.rotation_checks = 0
        self._cert_digest = self._read_cert_digest()
        self.mismatched_peers = Gauge(
            "grid_signal_transport_mismatched_peers",
            "Peers gossiping another signal transport mode than this site runs "
            "(SignalTransportMismatch); their signals score as neutral.",
            registry=registry,
        )

    def mode_mismatch(self, replica: GridState) -> tuple[tuple[str, str], ...]:
        """(site, mode) of each peer whose metadata lane gossips another mode; sets the gauge."""
        if self.running is None:
            return ()
        peers = {}
        for origin in replica.origins():
            snapshot = replica.snapshot(origin)
            if origin != self.settings.site and snapshot is not None:
                peers[origin] = snapshot.metadata.signal_transport
        found = mismatched(self.running.mode, peers)
        self.mismatched_peers.set(len(found))
        return found

    async def fix(self, network: GridNetwork, epoch: int) -> Mode:
        """Read the mode once; under poll, build the transport with the declared trust."""
        mode: Mode = network.spec.signal_mode
        if mode == "gossip":
            self.running = Running(network.name, mode)
            return mode
        s = self.settings
        if not (s.ca and s.cert and s.key):
            raise StartupError("signalTransport.mode: poll needs --ca, --cert and --key")
        trust = await self.declared_trust(network)
        assert trust is not None
        self.running = Running(network.name, mode, trust)
        self.transport = PollTransport(
            network.name,
            s.site,
            epoch=epoch,
            now=dt.datetime.now(dt.UTC),
            trust=trust,
            tls_files=(s.ca, s.cert, s.key),
            registry=self.registry,
            poll_interval_s=s.signals_poll_interval_s,
        )
        self.tls_contexts += [self.transport.server.ssl_context, self.transport.poller.ssl_context]
        log.info("signal transport fixed", extra={"mode": mode})
        return mode

    async def declared_trust(self, network: GridNetwork | None) -> TrustPolicy | None:
        """The trust the store declares now, or None without a site certificate."""
        if network is None or self.settings.cert is None:
            return None
        sites = [GridSite.model_validate(o) for o in await self.store.list("GridSite")]
        return trust_of(network, sites, self.settings.site, leaf_der(self.settings.cert))

    async def judge(self, network: GridNetwork | None) -> None:
        """Raise `StartupError` (exit for a restart) when the declaration left what runs."""
        if network is None or self.running is None:
            return
        trust = await self.declared_trust(network) if self.running.mode == "poll" else None
        verdict = judge(self.running, network.spec.signal_mode, trust)
        if verdict is not None:
            raise StartupError(verdict)

    def lane_labels(self) -> dict[str, str]:
        """Metadata-lane labels this transport adds: the signals port when one is bound
        (``--signals-advertise-port`` when set, else the bound port)."""
        if self.transport is None or self.transport.server.address is None:
            return {}
        port = self.settings.signals_advertise_port or self.transport.server.address[1]
        return {SIGNALS_PORT_LABEL: str(port)}

    def poll_targets(self, members: Iterable[Member], replica: GridState) -> dict[str, str]:
        """Every alive member at its SWIM host and its advertised signals port."""
        ports = {}
        for origin in replica.origins():
            snapshot = replica.snapshot(origin)
            port = dict(snapshot.metadata.labels).get(SIGNALS_PORT_LABEL) if snapshot else None
            if port is not None and port.isdigit():
                ports[origin] = int(port)
        return poll_targets(members, self.settings.site, ports)

    def signals_view(
        self,
        records: list[OriginRecord],
        own_records: dict[str, ProviderRecord | None],
        now: dt.datetime,
        stale_ttl_s: float | None,
    ) -> SignalsDocument:
        """Under poll, the document to render from: own scraped entries plus pulled ones.

        Own entries come from the scrapes held locally, because the records on
        SWIM carry no signal values under poll.
        """
        assert self.transport is not None
        site = self.settings.site
        own = []
        for item in records:
            held = own_records.get(item.record.name)
            if item.origin == site and held is not None:
                own.append(signals_entry(held))
        return self.transport.refresh(own, now, stale_ttl_s)

    def _read_cert_digest(self) -> str:
        digest = hashlib.sha256()
        for path in (self.settings.cert, self.settings.key):
            if path is not None:
                with contextlib.suppress(OSError):
                    digest.update(path.read_bytes())
        return digest.hexdigest()

    async def rotation_loop(
        self,
        network: Callable[[], GridNetwork | None],
        rotated: Callable[[], Awaitable[None]],
    ) -> None:
        """Reload the site certificate when its files change, if declared trust rotates.

        The declared trust is read on every check (seed 000): under spiffe the
        mounted SVID files are re-read when they change; under pin nothing is, so a
        switch to pin stops rotation without a restart (under poll that switch is a
        trust change, which restarts the process instead).
        """
        while True:
            await asyncio.sleep(self.settings.cert_check_interval_s)
            self.rotation_checks += 1
            declared = network()
            tls = declared.spec.tls if declared is not None else None
            if not rotates(tls.trust.mode if tls is not None else "pin"):
                continue
            digest = self._read_cert_digest()
            if digest == self._cert_digest:
                continue
            cert, key = self.settings.cert, self.settings.key
            assert cert is not None and key is not None
            try:
                for context in self.tls_contexts:
                    context.load_cert_chain(str(cert), str(key))
            except (OSError, ssl.SSLError, ValueError):
                log.warning("rotated certificate unreadable; keeping the current one")
                continue
            self._cert_digest = digest
            self.rotations.inc()
            log.info("site certificate reloaded")
            await rotated()
