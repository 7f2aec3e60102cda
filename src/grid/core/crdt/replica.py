"""GridState: the local replica of every origin's GridStateSnapshot.

The SWIM machine hands each received broadcast item (lane, origin, revision,
payload) to `GridState.apply`, which decodes the payload and merges it into
that origin's snapshot. The outcome tells the caller what to do next:

* ``applied``: new state; re-broadcast the received item as it is;
* ``unchanged`` / ``stale``: nothing new; drop it;
* ``reasserted``: a peer holds a revision of *our own* lane that is at least as
  new as ours (for example from before a restart). We keep our value, join the
  state lane, and bump our revision past theirs, like a SWIM refutation; the
  caller broadcasts our item for that lane;
* ``discarded``: a cert-lane PEM carried a private-key marker. It is counted in
  ``counters.private_key_discards`` and never stored, re-broadcast or logged.

Any other undecodable payload raises a `ProtocolError` subclass.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from grid.core.crdt.gcounter import GCounter
from grid.core.crdt.payload import DEFAULT_LIMITS, PayloadError, PayloadLimits, decode_lane
from grid.core.crdt.payload import encode_lane as _encode
from grid.core.crdt.record import ProviderRecord
from grid.core.crdt.snapshot import GridStateSnapshot, PrivateKeyRefused
from grid.core.swim.messages import BroadcastItem, Lane

REVISION_MAX = 2**64 - 1
"""Revisions travel as uint64."""


class MergeOutcome(StrEnum):
    """What `GridState.apply` did with a received item."""

    APPLIED = "applied"
    UNCHANGED = "unchanged"
    STALE = "stale"
    REASSERTED = "reasserted"
    DISCARDED = "discarded"


@dataclass(slots=True)
class ReplicaCounters:
    """Counters a caller exports as metrics; labels are closed enums, never identities."""

    private_key_discards: int = 0


class GridState:
    """Many origins' snapshots; the local origin's is written through `update_local`."""

    def __init__(
        self, local_origin: str, base_revision: int = 0, limits: PayloadLimits = DEFAULT_LIMITS
    ) -> None:
        self.local_origin = local_origin
        self.limits = limits
        self.counters = ReplicaCounters()
        self._snapshots: dict[str, GridStateSnapshot] = {
            local_origin: GridStateSnapshot.empty(local_origin, base_revision)
        }

    @property
    def local(self) -> GridStateSnapshot:
        """The local origin's snapshot."""
        return self._snapshots[self.local_origin]

    def snapshot(self, origin: str) -> GridStateSnapshot | None:
        """One origin's snapshot, if known."""
        return self._snapshots.get(origin)

    def origins(self) -> list[str]:
        """Every known origin, sorted."""
        return sorted(self._snapshots)

    def update_local(self, snapshot: GridStateSnapshot) -> list[BroadcastItem]:
        """Install a new local snapshot; return items for the lanes whose revision moved."""
        if snapshot.origin != self.local_origin:
            raise ValueError("update_local takes the local origin's snapshot")
        before = self.local
        self._snapshots[self.local_origin] = snapshot
        return [
            self.item(self.local_origin, lane)
            for lane in Lane
            if snapshot.revision(lane) != before.revision(lane)
        ]

    def item(self, origin: str, lane: Lane) -> BroadcastItem:
        """The current broadcast item of one origin's lane."""
        snap = self._snapshots[origin]
        return BroadcastItem(lane, origin, snap.revision(lane), _encode(snap.lane_value(lane)))

    def items(self) -> list[BroadcastItem]:
        """Every written lane of every origin (push-pull anti-entropy)."""
        return [
            self.item(origin, lane)
            for origin in self.origins()
            for lane in Lane
            if self._snapshots[origin].revision(lane) > 0
        ]

    def forget(self, origin: str) -> None:
        """Drop a remote origin's snapshot (a site that left or went stale)."""
        if origin != self.local_origin:
            self._snapshots.pop(origin, None)

    def apply(self, item: BroadcastItem) -> MergeOutcome:
        """Merge a received item; raises only `ProtocolError` subclasses on bad input."""
        try:
            lane = Lane(item.lane)
        except ValueError as exc:
            raise PayloadError("unknown lane", code="unknown_lane") from exc
        if not item.origin or item.revision < 0:
            raise PayloadError("item has no origin or a negative revision", code="bad_item")
        current = self._snapshots.get(item.origin) or GridStateSnapshot.empty(item.origin)
        if item.revision < current.revision(lane):
            return MergeOutcome.STALE
        if item.revision == current.revision(lane) and item.payload == _encode(
            current.lane_value(lane)
        ):
            return MergeOutcome.UNCHANGED
        try:
            value = decode_lane(lane, item.payload, item.origin, self.limits)
        except PrivateKeyRefused:
            self.counters.private_key_discards += 1
            return MergeOutcome.DISCARDED
        if item.origin == self.local_origin:
            return self._reassert(lane, item.revision, current, value)
        merged = current.merge_lane(lane, item.revision, value)
        if merged == current:
            return MergeOutcome.UNCHANGED
        self._snapshots[item.origin] = merged
        return MergeOutcome.APPLIED

    def _reassert(
        self, lane: Lane, revision: int, current: GridStateSnapshot, value: object
    ) -> MergeOutcome:
        """A peer echoed our own lane at >= our revision with other content: refute it."""
        joined = current
        if lane is Lane.STATE and isinstance(value, type(current.state)):
            joined = current.with_lane(lane, current.revision(lane), current.state.merge(value))
        # Clamped to the wire's uint64 range; a peer holding the maximum cannot be
        # out-ranked, which only a key holder can cause.
        bumped = min(revision + 1, REVISION_MAX)
        self._snapshots[self.local_origin] = joined.with_lane(lane, bumped, joined.lane_value(lane))
        return MergeOutcome.REASSERTED

    # -- read views for scoring and budgets ----------------------------------------

    def providers(self) -> Iterator[tuple[str, str, ProviderRecord]]:
        """Every live provider record as ``(origin, provider_id, record)``."""
        for origin in self.origins():
            for pid, record in sorted(self._snapshots[origin].state.live_providers().items()):
                yield origin, pid, record

    def capabilities(self, kind: str) -> frozenset[str]:
        """The union of one capability kind across every origin."""
        found: set[str] = set()
        for snap in self._snapshots.values():
            found |= snap.state.capability(kind).elements
        return frozenset(found)

    def spend(self, tenant: str) -> GCounter:
        """A tenant's spend across the grid: each origin's own slot, merged."""
        total = GCounter()
        for snap in self._snapshots.values():
            counter = snap.state.spend.get(tenant)
            if counter is not None:
                total = total.merge(counter)
        return total
