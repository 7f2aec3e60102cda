"""Auto-discovery: a GridSite for every remote alive SWIM member, fed from its lanes.

The rules are `grid.core.resources.discovery`; this module reads the SWIM view
and the replica and writes the store. A member's lanes are read through
`GridState.introduced`: its own when trusted, else those of its introduction
(a certificate from the grid CA that no pin names yet, and the lanes signed by
its key), which is what lets a site nobody pinned be discovered at all.

Each round, when the served network asks for it, every remote member that is
alive (or suspect) and has no GridSite (by object name, or by the member
annotation of a discovered one) gets one;
an existing discovered site whose gateway or metadata lane moved gets the new
egress, region and zone, never losing a person's trust. A site is written
only when something changed, so an idle grid writes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from grid.adapters.store.port import ResourceStore
from grid.core.crdt.replica import GridState
from grid.core.resources import GridNetwork, GridSite
from grid.core.resources.discovery import (
    discovered_manifest,
    discovery_on,
    is_discovered,
    member_of,
    spec_update,
)
from grid.core.swim.members import MemberState
from grid.errors import AlreadyExists, Conflict

log = logging.getLogger(__name__)


class SiteDiscovery:
    """Creates and refreshes auto-discovered GridSites of one network."""

    def __init__(self, store: ResourceStore, own_site: str) -> None:
        self._store = store
        self._own_site = own_site

    async def reconcile(
        self,
        network: GridNetwork,
        sites: list[GridSite],
        members: dict[str, MemberState],
        replica: GridState,
    ) -> bool:
        """One round; True when a GridSite was created or changed."""
        if not discovery_on(network):
            return False
        known = {member_of(s): s for s in sites}
        names = {s.name for s in sites}
        changed = False
        for member, state in sorted(members.items()):
            seen = replica.introduced(member)
            if member == self._own_site or not state.live or seen is None:
                continue
            _cert, gateway, metadata = seen
            site = known.get(member)
            if site is None:
                manifest = discovered_manifest(network.name, member, gateway, metadata)
                if manifest["metadata"]["name"] in names:
                    continue
                changed |= await self._create(manifest)
            elif is_discovered(site):
                spec = spec_update(site, network.name, gateway, metadata)
                if spec is not None:
                    obj = site.model_dump(by_alias=True, exclude_none=True, mode="json")
                    obj["spec"] = spec
                    obj.pop("status", None)
                    try:
                        await self._store.replace(obj)
                    except Conflict:
                        continue  # a person edited it meanwhile; the next round retries
                    changed = True
        return changed

    async def _create(self, manifest: dict[str, Any]) -> bool:
        try:
            await self._store.create(manifest)
        except AlreadyExists:
            # Another writer created it meanwhile; the next round sees it.
            return False
        log.info("site discovered", extra={"site": manifest["metadata"]["name"]})
        return True
