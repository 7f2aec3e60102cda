"""Site rounds: SWIM's view of the members turned into GridSite phases, discovery included.

Each round reads the GridSites of the served network and SWIM's member states,
lets auto-discovery create sites for new members, then moves every site's phase
(`grid.operator.sites.SiteController`). Rounds never overlap. This is a mixin of
`grid.operator.runtime.Operator`, kept apart so the wiring stays readable; it
holds no state of its own.
"""

from __future__ import annotations

import asyncio

from prometheus_client import Gauge, Histogram

from grid.adapters.store.port import ResourceStore
from grid.adapters.swim_node import SwimNode
from grid.core.crdt.replica import GridState
from grid.core.resources import GridSite
from grid.core.resources.site_offers import member_certs, member_offers
from grid.core.swim.members import MemberState
from grid.operator.discovery import SiteDiscovery
from grid.operator.network import ServedNetwork
from grid.operator.settings import OperatorSettings
from grid.operator.sites import SiteController


class SiteRounds:
    """The GridSite rounds; mixed into `Operator`, which owns the attributes."""

    settings: OperatorSettings
    store: ResourceStore
    swim: SwimNode | None
    served: ServedNetwork
    replica: GridState
    sites: SiteController
    discovery: SiteDiscovery
    members_gauge: Gauge
    reconcile_seconds: Histogram
    _site_lock: asyncio.Lock
    _dirty: asyncio.Event

    def member_states(self) -> dict[str, MemberState]:
        """SWIM's view of every member, by site name."""
        if self.swim is None:
            return {}
        return {m.id: m.state for m in self.swim.members()}

    async def _site_loop(self) -> None:
        while True:
            with self.reconcile_seconds.labels("sites").time():
                await self._site_round()
            await asyncio.sleep(self.settings.site_probe_interval_s)

    async def _site_round(self) -> None:
        """One site round; rounds never overlap, whoever starts one."""
        async with self._site_lock:
            await self._reconcile_sites()

    async def _reconcile_sites(self) -> None:
        """Discover sites, then move every site's phase; marks the view dirty on change."""
        sites = await self._sites()
        members = self.member_states()
        for state in MemberState:
            self.members_gauge.labels(state.value).set(
                sum(1 for s in members.values() if s is state)
            )
        network = self.served.network
        assert network is not None
        if await self.discovery.reconcile(network, sites, members, self.replica):
            sites = await self._sites()
        ttl = network.spec.stale_candidate_ttl_seconds
        if await self.sites.reconcile(
            sites,
            members,
            left_after_s=None if ttl is None else float(ttl),
            certs=member_certs(self.replica, members),
            offers=member_offers(self.replica, sites),
        ):
            self._dirty.set()

    async def _sites(self) -> list[GridSite]:
        sites = [GridSite.model_validate(o) for o in await self.store.list("GridSite")]
        return [s for s in sites if s.spec.grid_network_ref == self.served.name]
