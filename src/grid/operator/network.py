"""The GridNetwork one operator serves: its start, its gridId and its status.

At start the network gets a gridId on first join and moves Pending ->
Initializing. While running, the site adopts the grid's oldest gridId as peers
gossip theirs (unless the spec pins one), and writes the status after each
render round. The decisions are `grid.core.resources.network_status`; this
module reads and writes the store.

The mode is read once at start, so a declared change is a restart, not a live
flip (seed 000); so is a second GridNetwork in the store, or the deletion of ours.
Whether a declaration of ours still matches what runs is judged by
`grid.operator.lifecycle`.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from grid.adapters.store.port import EventType, ResourceStore
from grid.core.crdt.replica import GridState
from grid.core.resources import GridNetwork, GridSite
from grid.core.resources.network_status import RoundOutcome, rendered_patch, start_patch
from grid.core.resources.overlay_status import overlay_status_patch
from grid.core.resources.phases import SitePhase
from grid.core.resources.seed_fields import upstream_policy_patch
from grid.core.routing.mesh_view import GRID_ID_LABEL, converged_grid_id
from grid.operator.resilience import WriteGuard, WriteSite
from grid.operator.startup import StartupError, new_grid_id
from grid.operator.watched_store import read_models

log = logging.getLogger(__name__)


class ServedNetwork:
    """The served GridNetwork as last read or written, and the gridId this site uses."""

    def __init__(self, store: ResourceStore, site: str, guard: WriteGuard | None = None) -> None:
        self.store = store
        self.site = site
        self.guard = guard or WriteGuard()
        self.network: GridNetwork | None = None
        self.grid_id = ""
        self.mode: str | None = None
        """The signal mode this process fixed at start (named when another network appears)."""

    @property
    def name(self) -> str:
        """The served network's name (set once `initialize` ran)."""
        assert self.network is not None
        return self.network.name

    async def sites(self) -> list[GridSite]:
        """The GridSites of the served network, as the store holds them now."""
        sites = await read_models(self.store, "GridSite", GridSite)
        return [s for s in sites if s.spec.grid_network_ref == self.name]

    async def initialize(self, network: GridNetwork) -> GridNetwork:
        """Persist a gridId on first join and move Pending -> Initializing."""
        patch = start_patch(network, new_grid_id)
        if patch:
            obj = await self.store.patch_status("GridNetwork", network.name, patch)
            network = GridNetwork.model_validate(obj)
        assert network.status is not None and network.status.grid_id
        self.network = network
        self.grid_id = network.status.grid_id
        log.info("serving network", extra={"network": network.name, "grid_id": self.grid_id})
        return network

    async def converge_grid_id(self, network: GridNetwork, replica: GridState) -> bool:
        """Adopt the grid's oldest gridId as peers gossip theirs (unless spec pins one).

        True when this site adopted another id, which its metadata lane must then carry.
        """
        if network.spec.grid_id:
            return False
        gossiped = []
        for origin in replica.origins():
            snapshot = replica.snapshot(origin)
            if snapshot is not None and origin != self.site:
                gossiped.append(dict(snapshot.metadata.labels).get(GRID_ID_LABEL, ""))
        agreed = converged_grid_id(self.grid_id, gossiped)
        if agreed == self.grid_id:
            return False
        log.info("adopting the grid's gridId", extra={"grid_id": agreed, "was": self.grid_id})
        await self.guard.write(
            WriteSite.NETWORK_STATUS,
            lambda: self.store.patch_status("GridNetwork", network.name, {"gridId": agreed}),
        )
        self.grid_id = agreed
        return True

    def on_event(self, kind: EventType, obj: dict[str, Any]) -> None:
        """Track our network; raise (for a restart) when it goes or another one appears."""
        if kind is EventType.DELETED and obj["metadata"]["name"] == self.name:
            raise StartupError(f"GridNetwork {self.name!r} was deleted; stopping")
        if kind is EventType.DELETED:
            return
        if obj["metadata"]["name"] != self.name:
            other = GridNetwork.model_validate(obj)
            if self.mode is not None and other.spec.signal_mode != self.mode:
                raise StartupError(
                    f"GridNetwork {other.name!r} appeared declaring signalTransport.mode: "
                    f"{other.spec.signal_mode}, this process serves {self.mode}; "
                    "one operator serves one GridNetwork"
                )
            raise StartupError(
                f"a second GridNetwork {obj['metadata']['name']!r} appeared; "
                "one operator serves one GridNetwork"
            )
        self.network = GridNetwork.model_validate(obj)

    async def write_status(
        self,
        name: str,
        overlays: Sequence[Mapping[str, Any]],
        site_phases: Mapping[str, SitePhase],
        outcome: RoundOutcome,
        consumers: Sequence[Mapping[str, Any]] = (),
        budgets: Sequence[Mapping[str, Any]] = (),
        revisions: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Write what a render round changed in network ``name``'s status, if anything.

        ``revisions`` are the round's ``overlayStatus`` items, written in the same patch.
        """
        (fresh,) = await read_models(self.store, "GridNetwork", GridNetwork, name)
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        patch = rendered_patch(fresh, overlays, site_phases, outcome, now, consumers, budgets)
        stored = [
            o.model_dump(by_alias=True, exclude_none=True)
            for o in (fresh.status.overlay_status if fresh.status else [])
        ]
        moved = overlay_status_patch(stored, revisions)
        if moved:
            patch = {**patch, **moved, "observedGeneration": fresh.metadata.generation}
        if patch:
            obj = await self.guard.write(
                WriteSite.NETWORK_STATUS,
                lambda: self.store.patch_status("GridNetwork", name, patch),
            )
            self.network = fresh = GridNetwork.model_validate(obj)
        await self._write_upstream_policy(fresh)

    async def _write_upstream_policy(self, network: GridNetwork) -> None:
        """Record the UpstreamPolicy condition (§2a) when it changed."""
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        patch = upstream_policy_patch(network, now)
        if patch:
            obj = await self.guard.write(
                WriteSite.NETWORK_STATUS,
                lambda: self.store.patch_status("GridNetwork", network.name, patch),
            )
            self.network = GridNetwork.model_validate(obj)
