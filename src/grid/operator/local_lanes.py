"""Our own lanes: how the operator writes this site's state into the CRDT replica.

The operator publishes four lanes of its own (SPEC-DECISIONS §4): the provider
records, capabilities and tenant-spend slot (state), and the cert, metadata and gateway lanes from
its certificate and GridSite. Every write goes through the SWIM node's task, so
it builds on the newest revision of our lanes, re-assertions included. This is
a mixin of `grid.operator.runtime.Operator`, kept apart so the wiring stays
readable; it holds no state of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

import aiohttp

from grid.adapters.store.port import ResourceStore
from grid.adapters.swim_node import SwimNode
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
from grid.core.resources import GridSite
from grid.core.routing.mesh_view import GRID_ID_LABEL
from grid.core.trust import public_chain_pem
from grid.errors import NotFound, ValidationError
from grid.operator.budgets import BudgetMeter
from grid.operator.gateway_scrape import GatewayScrape
from grid.operator.lifecycle import SignalLifecycle
from grid.operator.live import OperatorLiveView
from grid.operator.network import ServedNetwork
from grid.operator.settings import OperatorSettings

log = logging.getLogger("grid.operator.runtime")


class LocalLanes:
    """Publishing this site's lanes; mixed into `Operator`, which owns the attributes."""

    settings: OperatorSettings
    store: ResourceStore
    swim: SwimNode | None
    served: ServedNetwork
    signals: SignalLifecycle
    _records: dict[str, ProviderRecord | None]
    _dirty: asyncio.Event
    replica: GridState
    budget_meter: BudgetMeter
    gateways: GatewayScrape
    live: OperatorLiveView

    async def _write_local(self, change: Callable[[GridStateSnapshot], GridStateSnapshot]) -> bool:
        """Apply ``change`` to our snapshot and disseminate it; True when published.

        The change runs in the SWIM node's task (`SwimNode.write_local`), so it
        always builds on the newest revision of our lanes, re-assertions
        included. A refusal (a change that breaks a snapshot rule) is logged by
        its code and retried on the next render round.
        """
        assert self.swim is not None
        try:
            await self.swim.write_local(change)
        except ValidationError as exc:
            log.warning("local state write refused; retrying", extra={"code": exc.code})
            self._dirty.set()
            return False
        return True

    async def _publish_site_lanes(self) -> None:
        """Publish our cert lane, and the metadata and gateway lanes from our GridSite."""
        cert = CertLaneValue(pem=self._public_cert_pem())
        try:
            own = GridSite.model_validate(await self.store.get("GridSite", self.settings.site))
        except NotFound:
            await self._write_local(lambda snap: snap.set_lane(Lane.CERT, cert))
            return
        metadata = MetadataLaneValue(
            region=own.spec.region or "",
            zone=own.spec.zone or "",
            sovereignty_zone=own.spec.sovereignty_zone or "",
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
            return snap.sync_capability("models", models)

        if await self._write_local(change):
            for name, record in records.items():
                if record is None and self._records.get(name) is None:
                    self._records.pop(name, None)

    async def _budget_loop(self) -> None:
        """Scrape the local gateways, price their tokens, raise and gossip our slot."""
        async with aiohttp.ClientSession() as http:
            while True:
                traffic = self.gateways.traffic()
                scraped = await self.gateways.scrape(http)
                if self.gateways.traffic() != traffic:
                    self.live.changes.notify()
                grew = await self.budget_meter.observe(scraped, self.replica)
                before = self.replica.local
                await self._write_local(self.budget_meter.publish)
                if grew or self.replica.local != before:
                    self._dirty.set()
                await asyncio.sleep(self.settings.budget_scrape_interval_s)
