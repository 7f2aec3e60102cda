"""Site rounds: SWIM's view of the members turned into GridSite phases, discovery included.

Each round reads the GridSites of the served network and SWIM's member states,
lets auto-discovery create sites for new members, then moves every site's phase
(`grid.operator.sites.SiteController`). Rounds never overlap, whoever starts one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import Gauge, Histogram

from grid.adapters.swim_node import SwimNode
from grid.core.crdt.replica import GridState
from grid.core.resources.site_offers import member_certs, member_offers
from grid.core.swim.members import MemberState
from grid.operator.discovery import SiteDiscovery
from grid.operator.network import ServedNetwork
from grid.operator.resilience import RoundFailures, guarded_rounds
from grid.operator.sites import SiteController


class SiteRounds:
    """The GridSite controller's rounds, every ``interval_s`` and on demand."""

    def __init__(
        self,
        served: ServedNetwork,
        swim: Callable[[], SwimNode | None],
        replica: GridState,
        sites: SiteController,
        discovery: SiteDiscovery,
        *,
        interval_s: float,
        members_gauge: Gauge,
        durations: Histogram,
        changed: Callable[[], None],
        failures: RoundFailures | None = None,
    ) -> None:
        """``swim`` gives the running node (None before it joined); ``changed`` is called
        when a round moved a phase, so the overlays are rendered again."""
        self.served = served
        self._swim = swim
        self.replica = replica
        self.sites = sites
        self.discovery = discovery
        self.interval_s = interval_s
        self.members_gauge = members_gauge
        self.durations = durations
        self._changed = changed
        self._lock = asyncio.Lock()
        self.failures = failures or RoundFailures()

    def member_states(self) -> dict[str, MemberState]:
        """SWIM's view of every member, by site name."""
        swim = self._swim()
        if swim is None:
            return {}
        return {m.id: m.state for m in swim.members()}

    async def run(self) -> None:
        """A round every ``interval_s``, forever."""
        while True:
            with self.durations.labels("sites").time():
                await guarded_rounds("sites", self.failures, self.round)
            await asyncio.sleep(self.interval_s)

    async def round(self) -> None:
        """One site round; rounds never overlap, whoever starts one."""
        async with self._lock:
            await self._reconcile()

    async def _reconcile(self) -> None:
        """Discover sites, then move every site's phase; reports a change."""
        sites = await self.served.sites()
        members = self.member_states()
        for state in MemberState:
            self.members_gauge.labels(state.value).set(
                sum(1 for s in members.values() if s is state)
            )
        network = self.served.network
        assert network is not None
        if await self.discovery.reconcile(network, sites, members, self.replica):
            sites = await self.served.sites()
        ttl = network.spec.stale_candidate_ttl_seconds
        if await self.sites.reconcile(
            sites,
            members,
            left_after_s=None if ttl is None else float(ttl),
            certs=member_certs(self.replica, members),
            offers=member_offers(self.replica, sites),
        ):
            self._changed()
