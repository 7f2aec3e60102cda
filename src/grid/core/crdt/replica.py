"""GridState: the local replica of every origin's GridStateSnapshot.

The SWIM machine hands each received broadcast item (lane, origin, revision,
payload, signature) to `GridState.admit`, which merges it through `apply` and
says which items the machine may hold and relay. The outcome of `apply`:

* ``applied``: new state; the received item is held and re-broadcast as it is;
* ``unchanged`` / ``stale``: nothing new; drop it;
* ``reasserted``: a peer holds a revision of *our own* lane that is at least as
  new as ours (for example from before a restart). We keep our value, join the
  state lane, and bump our revision past theirs, like a SWIM refutation; the
  machine then holds and broadcasts our item for that lane;
* ``discarded``: a cert-lane PEM carried a private-key marker. It is counted in
  ``counters.private_key_discards`` and never stored, re-broadcast or logged;
* ``rejected``: the payload does not decode or breaks a limit, or the item
  failed origin authentication. It is counted under a closed reason
  (`grid.core.crdt.origin.REJECT_REASONS`) and changes nothing: no revision
  moves, and the machine does not hold it, so a valid item of the same origin
  and lane is still taken later;
* ``pending``: its origin's certificate is not verified yet; it waits in a
  bounded queue and is applied once the certificate is.

With `OriginAuth` (the operator always passes one) every item must carry a
signature by its origin's site key; certificates come from the cert lane and
are accepted only as `OriginTrust` allows; an origin without a verified
certificate contributes no providers, capabilities or spend. Without it (unit
tests, benchmarks) items are taken unsigned.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from grid.core.crdt.gcounter import GCounter
from grid.core.crdt.origin import (
    REJECT_REASONS,
    OriginAuth,
    OriginRefused,
    OriginTrust,
    PendingItems,
    VerifiedOrigin,
    item_signature_valid,
)
from grid.core.crdt.payload import DEFAULT_LIMITS, PayloadError, PayloadLimits, decode_lane
from grid.core.crdt.payload import encode_lane as _encode
from grid.core.crdt.record import ProviderRecord
from grid.core.crdt.snapshot import (
    CertLaneValue,
    GatewayLaneValue,
    GridStateSnapshot,
    LaneValue,
    MetadataLaneValue,
    PrivateKeyRefused,
    StateLaneValue,
)
from grid.core.swim.messages import BroadcastItem, Lane
from grid.errors import ProtocolError

REVISION_MAX = 2**64 - 1
"""Revisions travel as uint64."""


class MergeOutcome(StrEnum):
    """What `GridState.apply` did with a received item."""

    APPLIED = "applied"
    UNCHANGED = "unchanged"
    STALE = "stale"
    REASSERTED = "reasserted"
    DISCARDED = "discarded"
    REJECTED = "rejected"
    PENDING = "pending"


def _reject_counts() -> dict[str, int]:
    return dict.fromkeys(REJECT_REASONS, 0)


@dataclass(slots=True)
class ReplicaCounters:
    """Counters a caller exports as metrics; labels are closed enums, never identities."""

    private_key_discards: int = 0
    dropped: dict[str, int] = field(default_factory=_reject_counts)
    """Dropped received items per reason of `REJECT_REASONS`."""

    def drop(self, reason: str) -> None:
        """Count one dropped item; a code outside the closed set counts as invalid."""
        self.dropped[reason if reason in self.dropped else "payload_invalid"] += 1


_HELD = (MergeOutcome.APPLIED, MergeOutcome.UNCHANGED)


class GridState:
    """Many origins' snapshots; the local origin's is written through `update_local`."""

    def __init__(
        self,
        local_origin: str,
        base_revision: int = 0,
        limits: PayloadLimits = DEFAULT_LIMITS,
        auth: OriginAuth | None = None,
    ) -> None:
        self.local_origin = local_origin
        self.limits = limits
        self.auth = auth
        self.counters = ReplicaCounters()
        self._snapshots: dict[str, GridStateSnapshot] = {
            local_origin: GridStateSnapshot.empty(local_origin, base_revision)
        }
        self._verified: dict[str, VerifiedOrigin] = {}
        self._introduced: dict[str, tuple[VerifiedOrigin, CertLaneValue]] = {}
        self._pending = PendingItems(auth.limits.pending_items_max if auth else 0)

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

    def trust_expiry(self) -> tuple[tuple[str, float], ...]:
        """Each verified origin with its certificate's expiry, after which it is not trusted."""
        return tuple(sorted((o, v.not_after) for o, v in self._verified.items()))

    def trusted(self, origin: str) -> bool:
        """Whether ``origin``'s state counts: ours, unauthenticated, or a verified cert."""
        if self.auth is None or origin == self.local_origin:
            return True
        verified = self._verified.get(origin)
        return verified is not None and self.auth.clock() <= verified.not_after

    @property
    def pending(self) -> int:
        """Items waiting for their origin's certificate."""
        return len(self._pending)

    def set_trust(self, trust: OriginTrust) -> list[str]:
        """Install new trust (pins changed); returns the origins it no longer trusts.

        Their state is forgotten at once; the caller also makes the machine
        forget their items, so that they are taken again once trusted.
        """
        if self.auth is None:
            return []
        self.auth = OriginAuth(trust, self.auth.clock, self.auth.signer, self.auth.limits)
        lost = []
        for origin in sorted(self._verified):
            snap = self._snapshots.get(origin)
            try:
                trust.check(origin, snap.cert.pem if snap else "", self.auth.clock())
            except OriginRefused:
                lost.append(origin)
                self.forget(origin)
        return lost

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
        item = BroadcastItem(lane, origin, snap.revision(lane), _encode(snap.lane_value(lane)))
        signer = self.auth.signer if self.auth is not None else None
        if origin == self.local_origin and signer is not None:
            return signer.sign_item(item)
        return item

    def items(self) -> list[BroadcastItem]:
        """Every written lane of every origin, as this replica holds it.

        Only our own items are signed: a remote state lane is a join of what
        was received, so the machine relays the origin's signed items instead.
        """
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
            self._verified.pop(origin, None)
            self._introduced.pop(origin, None)

    def admit(self, item: BroadcastItem) -> list[BroadcastItem]:
        """Merge a received item; return what the machine may hold and relay.

        That is the item itself when it was taken (plus the items it released
        from the pending queue, for a certificate), our own re-signed item after
        a reassertion, and nothing for an item that was dropped or must wait.
        """
        outcome = self.apply(item)
        if outcome is MergeOutcome.REASSERTED:
            return [self.item(self.local_origin, Lane(item.lane))]
        if outcome not in _HELD:
            return []
        held = [item]
        if item.lane is Lane.CERT and item.origin != self.local_origin:
            held += [w for w in self._pending.release(item.origin) if self.apply(w) in _HELD]
        return held

    def apply(self, item: BroadcastItem) -> MergeOutcome:
        """Merge a received item; bad input is counted and ``rejected``, never raised."""
        try:
            return self._apply(item)
        except PrivateKeyRefused:
            self.counters.private_key_discards += 1
            self.counters.drop("private_key_in_cert")
            return MergeOutcome.DISCARDED
        except ProtocolError as exc:
            self.counters.drop(exc.code)
            return MergeOutcome.REJECTED

    def _apply(self, item: BroadcastItem) -> MergeOutcome:
        try:
            lane = Lane(item.lane)
        except ValueError as exc:
            raise PayloadError("unknown lane", code="unknown_lane") from exc
        if not item.origin or not 0 <= item.revision <= REVISION_MAX:
            raise PayloadError("item has no origin or a revision out of range", code="bad_item")
        current = self._snapshots.get(item.origin) or GridStateSnapshot.empty(item.origin)
        if item.revision < current.revision(lane):
            return MergeOutcome.STALE
        # Authenticate before anything else is believed, "unchanged" included:
        # what the machine holds and relays must verify.
        if self.auth is not None and lane is not Lane.CERT and not self._signature_checked(item):
            return self._wait(item)
        value = decode_lane(lane, item.payload, item.origin, self.limits)
        verified = None
        if self.auth is not None and lane is Lane.CERT:
            verified = self._cert_checked(item, value)
        if item.revision == current.revision(lane) and item.payload == _encode(
            current.lane_value(lane)
        ):
            return MergeOutcome.UNCHANGED
        if item.origin == self.local_origin:
            return self._reassert(lane, item.revision, current, value)
        merged = current.merge_lane(lane, item.revision, value)
        if verified is not None and merged.cert == value:
            self._verified[item.origin] = verified
        if merged == current:
            return MergeOutcome.UNCHANGED
        self._snapshots[item.origin] = merged
        return MergeOutcome.APPLIED

    def _signature_checked(self, item: BroadcastItem) -> bool:
        """Check a non-cert item's signature; False when its origin has no verified cert."""
        assert self.auth is not None
        if item.origin == self.local_origin:
            signer = self.auth.signer
            if signer is None or not item_signature_valid(signer.public_key, item):
                raise OriginRefused("not signed by this site's key", code="bad_signature")
            return True
        if not self.trusted(item.origin):
            return False
        if not item.signature:
            raise OriginRefused("item carries no signature", code="unsigned")
        if not item_signature_valid(self._verified[item.origin].public_key, item):
            raise OriginRefused("signature does not verify", code="bad_signature")
        return True

    def _cert_checked(self, item: BroadcastItem, value: LaneValue) -> VerifiedOrigin | None:
        """A cert item must chain to the grid CA, name its origin and be signed by its key."""
        assert self.auth is not None and isinstance(value, CertLaneValue)
        if item.origin == self.local_origin:
            signer = self.auth.signer
            if signer is None or not item_signature_valid(signer.public_key, item):
                raise OriginRefused("not signed by this site's key", code="bad_signature")
            return None
        try:
            verified = self.auth.trust.check(item.origin, value.pem, self.auth.clock())
        except OriginRefused as exc:
            if exc.code == "cert_wrong_origin":
                self._introduce(item, value)
            raise
        if not item.signature:
            raise OriginRefused("cert item carries no signature", code="unsigned")
        if not item_signature_valid(verified.public_key, item):
            raise OriginRefused("cert item not signed by its key", code="bad_signature")
        return verified

    def _introduce(self, item: BroadcastItem, value: CertLaneValue) -> None:
        """Remember a CA-issued certificate no pin names yet, if its item is signed by it."""
        assert self.auth is not None
        known = item.origin in self._introduced
        if not known and len(self._introduced) >= self.auth.limits.pending_items_max:
            return  # bounded like the pending queue; the origin is introduced again later
        try:
            seen = self.auth.trust.check(item.origin, value.pem, self.auth.clock(), named=False)
        except OriginRefused:
            return
        if item_signature_valid(seen.public_key, item):
            self._introduced[item.origin] = (seen, value)

    def introduced(
        self, origin: str
    ) -> tuple[CertLaneValue, GatewayLaneValue, MetadataLaneValue] | None:
        """What an origin says about itself, for display and discovery only, never routing.

        A trusted origin's own lanes; else, for an origin whose cert-lane chain
        reaches the grid CA but that no pin names yet, that certificate and its
        waiting gateway and metadata items, each only when signed by that
        certificate's key. None when the origin is neither.
        """
        if self.trusted(origin):
            snap = self._snapshots.get(origin)
            return None if snap is None else (snap.cert, snap.gateway, snap.metadata)
        found = self._introduced.get(origin)
        if found is None:
            return None
        seen, cert = found
        lanes: list[LaneValue] = []
        for lane, empty in (
            (Lane.GATEWAY, GatewayLaneValue()),
            (Lane.METADATA, MetadataLaneValue()),
        ):
            item = self._pending.peek(origin, lane)
            value: LaneValue = empty
            if item is not None and item_signature_valid(seen.public_key, item):
                try:
                    value = decode_lane(lane, item.payload, origin, self.limits)
                except ProtocolError:
                    value = empty
            lanes.append(value)
        gateway, metadata = lanes
        assert isinstance(gateway, GatewayLaneValue) and isinstance(metadata, MetadataLaneValue)
        return cert, gateway, metadata

    def _wait(self, item: BroadcastItem) -> MergeOutcome:
        if self._pending.hold(item):
            return MergeOutcome.PENDING
        raise OriginRefused("pending queue full", code="pending_overflow")

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
        """Every live provider record of a trusted origin as ``(origin, provider_id, record)``."""
        for origin, state in self.provider_states():
            for pid, record in sorted(state.live_providers().items()):
                yield origin, pid, record

    def provider_states(self) -> Iterator[tuple[str, StateLaneValue]]:
        """Each trusted origin's state lane, in origin order, as `providers` reads it.

        Lane values are immutable: one that is the same object as before holds the
        same records (`grid.core.routing.live_cache` keeps what it made of each)."""
        for origin in self.origins():
            if self.trusted(origin):
                yield origin, self._snapshots[origin].state

    def capabilities(self, kind: str) -> frozenset[str]:
        """The union of one capability kind across every origin."""
        found: set[str] = set()
        for origin, snap in self._snapshots.items():
            if self.trusted(origin):
                found |= snap.state.capability(kind).elements
        return frozenset(found)

    def spend(self, tenant: str) -> GCounter:
        """A tenant's spend across the grid: each origin's own slot, merged."""
        total = GCounter()
        for origin, snap in self._snapshots.items():
            if not self.trusted(origin):
                continue
            counter = snap.state.spend.get(tenant)
            if counter is not None:
                total = total.merge(counter)
        return total
