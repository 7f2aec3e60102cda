"""Our own lanes: how the operator writes this site's state into the CRDT replica.

The operator publishes four lanes of its own (SPEC-DECISIONS §4): the provider
records, capabilities and tenant-spend slot (state), and the cert, metadata and
gateway lanes from its certificate and GridSite. Every write goes through the
SWIM node's task, so it builds on the newest revision of our lanes,
re-assertions included. `LanePublisher` also holds the latest record of each own
provider, as the InferenceProvider controller reports them, until it is published.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from grid.adapters.store.port import ResourceStore
from grid.adapters.swim_node import SwimNode
from grid.core.crdt.offer import AgentOffer, OfferKind
from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.crdt.snapshot import (
    CertLaneValue,
    GatewayLaneValue,
    GridStateSnapshot,
    Lane,
    MetadataLaneValue,
    sorted_pairs,
)
from grid.core.resources import GridSite
from grid.core.routing.candidate import Geography
from grid.core.routing.mesh_view import GRID_ID_LABEL
from grid.core.routing.render import own_geography
from grid.core.trust import public_chain_pem
from grid.errors import NotFound, ValidationError
from grid.operator.lifecycle import SignalLifecycle
from grid.operator.network import ServedNetwork

log = logging.getLogger("grid.operator.runtime")

Change = Callable[[GridStateSnapshot], GridStateSnapshot]
"""A change to our own snapshot, applied in the SWIM node's task."""


class LanePublisher:
    """Writes this site's lanes: records, site lanes, and any other change to our snapshot."""

    def __init__(
        self,
        site: str,
        cert: Path | None,
        store: ResourceStore,
        served: ServedNetwork,
        signals: SignalLifecycle,
        swim: Callable[[], SwimNode | None],
        retry: Callable[[], None],
    ) -> None:
        """``cert`` is the site certificate for the cert lane; ``swim`` gives the running
        node; ``retry`` asks for another render round (a refused write is retried there)."""
        self.site = site
        self.cert = cert
        self.store = store
        self.served = served
        self.signals = signals
        self._swim = swim
        self._retry = retry
        self.records: dict[str, ProviderRecord | None] = {}
        """The latest record of each own provider (None: withdrawn, not yet published)."""
        self._cert_pem: str | None = None
        """The certificate chain the site serves, read once and again only on rotation."""

    def on_record(self, provider: str, record: ProviderRecord | None) -> None:
        """The InferenceProvider controller's latest record of ``provider``."""
        self.records[provider] = record

    async def write(self, change: Change) -> bool:
        """Apply ``change`` to our snapshot and disseminate it; True when published.

        The change runs in the SWIM node's task (`SwimNode.write_local`), so it
        always builds on the newest revision of our lanes, re-assertions
        included. A refusal (a change that breaks a snapshot rule) is logged by
        its code and retried on the next render round.
        """
        swim = self._swim()
        assert swim is not None
        try:
            await swim.write_local(change)
        except ValidationError as exc:
            log.warning("local state write refused; retrying", extra={"code": exc.code})
            self._retry()
            return False
        return True

    async def publish_rotated(self) -> None:
        """The site certificate was reloaded: publish the lanes with the new one."""
        self._cert_pem = None
        await self.publish_site_lanes()

    async def publish_site_lanes(self) -> None:
        """Publish our cert lane, and the metadata and gateway lanes from our GridSite.

        The cert lane carries the certificate the site serves: the file is read at the
        first publish and after a rotation, never on other publishes, so a file changed
        on disk under pin trust is not announced.
        """
        if self._cert_pem is None:
            self._cert_pem = self._public_cert_pem()
        cert = CertLaneValue(pem=self._cert_pem)
        try:
            own = GridSite.model_validate(await self.store.get("GridSite", self.site))
        except NotFound:
            await self.write(lambda snap: snap.set_lane(Lane.CERT, cert))
            return
        # The network's region and zone stand in where our GridSite names none.
        network = self.served.network
        geography = (
            own_geography(network, own)
            if network is not None
            else Geography(own.spec.region, own.spec.zone)
        )
        metadata = MetadataLaneValue(
            region=geography.region or "",
            zone=geography.zone or "",
            sovereignty_zone=own.spec.sovereignty_zone or "",
            signal_transport=self.served.mode or "",
            labels=sorted_pairs(
                {
                    **own.metadata.labels,
                    GRID_ID_LABEL: self.served.grid_id,
                    **self.signals.lane_labels(),
                }
            ),
        )
        gateway = GatewayLaneValue(
            egress_address=own.spec.egress.address if own.spec.egress else ""
        )
        await self.write(
            lambda snap: (
                snap.set_lane(Lane.METADATA, metadata)
                .set_lane(Lane.GATEWAY, gateway)
                .set_lane(Lane.CERT, cert)
            )
        )

    def geography(self) -> tuple[str | None, str | None]:
        """The served network's ``spec.region`` and ``spec.zone``."""
        network = self.served.network
        return (network.spec.region, network.spec.zone) if network is not None else (None, None)

    async def republish_if_moved(self, before: tuple[str | None, str | None]) -> None:
        """Publish the site lanes again when the network's geography moved from ``before``:
        it stands in for our GridSite's region and zone."""
        if self.geography() != before:
            await self.publish_site_lanes()

    def _public_cert_pem(self) -> str:
        """This site's public certificate chain for the cert lane ("" without --cert)."""
        if self.cert is None:
            return ""
        try:
            return public_chain_pem(self.cert.read_bytes())
        except (OSError, ValueError):
            log.warning("site certificate unreadable; cert lane left empty")
            return ""

    async def publish_records(
        self, offers: Callable[[OfferKind], set[AgentOffer]] | None = None
    ) -> None:
        """Write changed own records (and agent ``offers``) into the local snapshot and
        disseminate them.

        Under poll the signal values travel by poll, not over SWIM, so the
        records published carry none.
        """
        records = dict(self.records)
        if self.signals.transport is not None:
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
            models = {m for r in snap.state.live_providers().values() for m in r.models}
            snap = snap.sync_capability("models", models)
            kinds: tuple[OfferKind, ...] = ("tools", "agents") if offers is not None else ()
            for kind in kinds:
                assert offers is not None
                snap = snap.sync_capability(kind, {o.encode() for o in offers(kind)})
            return snap

        if await self.write(change):
            for name, record in records.items():
                if record is None and self.records.get(name) is None:
                    self.records.pop(name, None)
