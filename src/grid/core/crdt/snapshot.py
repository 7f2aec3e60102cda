"""GridStateSnapshot: everything one origin site tells the grid, in four lanes.

A snapshot belongs to one origin site and is written only by that site. Its
content is split into four independent invalidation lanes (seed 003), each with
its own revision, so that, for example, a gateway address update never has to
wait behind a provider state broadcast:

* ``state``: provider records in LWW registers keyed by provider ID, the
  capability OR-Sets (models, tools, agents) and per-tenant spend G-Counters;
* ``gateway``: the site's egress address and its gateways' addresses;
* ``cert``: the site's public certificate PEM;
* ``metadata``: region, zone, sovereignty zone and labels.

Merging two snapshots of the same origin joins the ``state`` lane as a CRDT and
settles every other lane as a last-writer-wins register ordered by ``(revision,
canonical repr)``. Every merge here is commutative, associative and idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from grid.core.crdt.gcounter import GCounter
from grid.core.crdt.lww import LwwRegister
from grid.core.crdt.orset import ORSet
from grid.core.crdt.record import ProviderRecord
from grid.core.swim.messages import Lane as Lane  # the snapshot's lanes, re-exported
from grid.core.trust import contains_private_key
from grid.errors import ProtocolError

CAPABILITY_KINDS = ("models", "tools", "agents")
"""The capability OR-Sets of the state lane."""


class PrivateKeyRefused(ProtocolError):
    """A certificate PEM carried a private-key marker and was refused.

    It is a `ProtocolError` because a received cert-lane payload fails this
    structural check while being decoded; the replica discards and counts it.
    """

    code = "private_key_in_cert"


Pairs = tuple[tuple[str, str], ...]


def sorted_pairs(pairs: Mapping[str, str] | Iterable[tuple[str, str]]) -> Pairs:
    """Canonical sorted key/value pairs, so lane values have a deterministic ``repr``."""
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    return tuple(sorted(dict(items).items()))


ProviderRegister = LwwRegister[ProviderRecord | None]
"""A provider's register; ``None`` is the value of a removed provider."""


@dataclass(frozen=True, slots=True)
class StateLaneValue:
    """The CRDT content of the ``state`` lane."""

    providers: Mapping[str, ProviderRegister] = field(default_factory=dict)
    models: ORSet[str] = field(default_factory=ORSet)
    tools: ORSet[str] = field(default_factory=ORSet)
    agents: ORSet[str] = field(default_factory=ORSet)
    spend: Mapping[str, GCounter] = field(default_factory=dict)

    def capability(self, kind: str) -> ORSet[str]:
        """The OR-Set of one capability kind (``models``, ``tools`` or ``agents``)."""
        if kind not in CAPABILITY_KINDS:
            raise KeyError(kind)
        result: ORSet[str] = getattr(self, kind)
        return result

    def with_capability(self, kind: str, updated: ORSet[str]) -> StateLaneValue:
        """A copy with one capability OR-Set replaced."""
        if kind == "models":
            return replace(self, models=updated)
        if kind == "tools":
            return replace(self, tools=updated)
        if kind == "agents":
            return replace(self, agents=updated)
        raise KeyError(kind)

    def live_providers(self) -> dict[str, ProviderRecord]:
        """Provider ID to record, leaving out removed providers."""
        return {pid: reg.value for pid, reg in self.providers.items() if reg.value is not None}

    def merge(self, other: StateLaneValue) -> StateLaneValue:
        """Join two state-lane values register by register, set by set, slot by slot."""
        providers = dict(self.providers)
        for pid, register in other.providers.items():
            mine = providers.get(pid)
            providers[pid] = register if mine is None else mine.merge(register)
        spend = dict(self.spend)
        for tenant, counter in other.spend.items():
            mine_counter = spend.get(tenant)
            spend[tenant] = counter if mine_counter is None else mine_counter.merge(counter)
        return StateLaneValue(
            providers=providers,
            models=self.models.merge(other.models),
            tools=self.tools.merge(other.tools),
            agents=self.agents.merge(other.agents),
            spend=spend,
        )


@dataclass(frozen=True, slots=True)
class GatewayLaneValue:
    """The ``gateway`` lane: the site's egress address and gateway name to address."""

    egress_address: str = ""
    gateways: Pairs = ()


@dataclass(frozen=True, slots=True)
class CertLaneValue:
    """The ``cert`` lane: the site's public certificate chain as PEM text."""

    pem: str = ""

    def __post_init__(self) -> None:
        if contains_private_key(self.pem):
            # The message never echoes the PEM: it may hold key material.
            raise PrivateKeyRefused("certificate PEM carries a private key marker")


@dataclass(frozen=True, slots=True)
class MetadataLaneValue:
    """The ``metadata`` lane: site geography and labels."""

    region: str = ""
    zone: str = ""
    sovereignty_zone: str = ""
    labels: Pairs = ()
    signal_transport: str = ""
    """The site's signal transport mode (``gossip`` or ``poll``); empty when unknown."""


LaneValue = StateLaneValue | GatewayLaneValue | CertLaneValue | MetadataLaneValue


def _lww_lane(mine: tuple[int, LaneValue], theirs: tuple[int, LaneValue]) -> tuple[int, LaneValue]:
    """Last-writer-wins for a non-CRDT lane: revision, then canonical ``repr``."""
    if (theirs[0], repr(theirs[1])) > (mine[0], repr(mine[1])):
        return theirs
    return mine


@dataclass(frozen=True, slots=True)
class GridStateSnapshot:
    """One origin site's replicated state, split into four lanes with revisions."""

    origin: str
    revisions: Mapping[Lane, int] = field(default_factory=dict)
    state: StateLaneValue = field(default_factory=StateLaneValue)
    gateway: GatewayLaneValue = field(default_factory=GatewayLaneValue)
    cert: CertLaneValue = field(default_factory=CertLaneValue)
    metadata: MetadataLaneValue = field(default_factory=MetadataLaneValue)

    def __post_init__(self) -> None:
        # Every lane always has a revision, so equal states compare equal.
        revisions = {lane: self.revisions.get(lane, 0) for lane in Lane}
        if any(rev < 0 for rev in revisions.values()):
            raise ValueError("lane revisions must be >= 0")
        object.__setattr__(self, "revisions", revisions)

    @classmethod
    def empty(cls, origin: str, base_revision: int = 0) -> GridStateSnapshot:
        """A fresh snapshot whose lanes start at ``base_revision``.

        After a restart the wiring should pass a value larger than any revision
        it published before (for example start-up time in milliseconds), so
        the new process's writes win over what peers still hold.
        """
        return cls(origin=origin, revisions=dict.fromkeys(Lane, base_revision))

    def revision(self, lane: Lane) -> int:
        """The current revision of ``lane`` (0 when never written)."""
        return self.revisions.get(lane, 0)

    def lane_value(self, lane: Lane) -> LaneValue:
        """The value of one lane."""
        value: LaneValue = getattr(self, lane.value)
        return value

    def with_lane(self, lane: Lane, revision: int, value: LaneValue) -> GridStateSnapshot:
        """A copy with ``lane`` set to ``value`` at ``revision`` (no merge)."""
        revisions = dict(self.revisions)
        revisions[lane] = revision
        if lane is Lane.STATE and isinstance(value, StateLaneValue):
            return replace(self, revisions=revisions, state=value)
        if lane is Lane.GATEWAY and isinstance(value, GatewayLaneValue):
            return replace(self, revisions=revisions, gateway=value)
        if lane is Lane.CERT and isinstance(value, CertLaneValue):
            return replace(self, revisions=revisions, cert=value)
        if lane is Lane.METADATA and isinstance(value, MetadataLaneValue):
            return replace(self, revisions=revisions, metadata=value)
        raise TypeError(f"a {type(value).__name__} is not a value of lane {lane.value}")

    def merge_lane(self, lane: Lane, revision: int, value: LaneValue) -> GridStateSnapshot:
        """Merge one lane's ``(revision, value)`` into this snapshot.

        The state lane joins as a CRDT (revision is the maximum); any other lane
        is last-writer-wins on ``(revision, canonical repr)``.
        """
        rev = max(self.revision(lane), revision)
        if isinstance(value, StateLaneValue):
            merged: LaneValue = self.state.merge(value)
        else:
            mine = (self.revision(lane), self.lane_value(lane))
            merged = _lww_lane(mine, (revision, value))[1]
        return self.with_lane(lane, rev, merged)

    def merge(self, other: GridStateSnapshot) -> GridStateSnapshot:
        """Merge two snapshots of the same origin, lane by lane."""
        if other.origin != self.origin:
            raise ValueError("only snapshots of the same origin merge")
        result = self
        for lane in Lane:
            result = result.merge_lane(lane, other.revision(lane), other.lane_value(lane))
        return result

    # -- local writes by the origin site ---------------------------------------------
    #
    # Each write returns a new snapshot with the lane's revision bumped. Register
    # revisions and OR-Set tag counters are drawn from the state lane's revision,
    # so a restarted origin seeded with a larger base revision still wins.

    def _next_state(self, state: StateLaneValue, revision: int) -> GridStateSnapshot:
        return self.with_lane(Lane.STATE, revision, state)

    def put_provider(self, provider_id: str, record: ProviderRecord | None) -> GridStateSnapshot:
        """Write (or, with ``None``, remove) a provider record under ``provider_id``."""
        existing = self.state.providers.get(provider_id)
        revision = self.revision(Lane.STATE) + 1
        if existing is not None:
            revision = max(revision, existing.revision + 1)
        providers = dict(self.state.providers)
        providers[provider_id] = LwwRegister(record, revision, self.origin)
        return self._next_state(replace(self.state, providers=providers), revision)

    def remove_provider(self, provider_id: str) -> GridStateSnapshot:
        """Remove a provider by writing the ``None`` value to its register."""
        if provider_id not in self.state.providers:
            return self
        return self.put_provider(provider_id, None)

    def add_capability(self, kind: str, element: str) -> GridStateSnapshot:
        """Add a model, tool or agent to the origin's capability set."""
        revision = self.revision(Lane.STATE) + 1
        updated = self.state.capability(kind).add(element, self.origin, floor=revision)
        return self._next_state(self.state.with_capability(kind, updated), revision)

    def remove_capability(self, kind: str, element: str) -> GridStateSnapshot:
        """Remove a capability, tombstoning only the tags observed here."""
        current = self.state.capability(kind)
        if element not in current:
            return self
        revision = self.revision(Lane.STATE) + 1
        updated = current.remove(element)
        return self._next_state(self.state.with_capability(kind, updated), revision)

    def sync_capability(self, kind: str, wanted: Iterable[str]) -> GridStateSnapshot:
        """Add the missing elements of ``wanted`` and remove the others (an OR-Set each).

        A no-op when the set already holds exactly ``wanted``, so a steady site
        bumps no revision.
        """
        target = set(wanted)
        snap = self
        present = self.state.capability(kind).elements
        for element in sorted(target - present):
            snap = snap.add_capability(kind, element)
        for element in sorted(present - target):
            snap = snap.remove_capability(kind, element)
        return snap

    def add_spend(self, tenant: str, amount: int) -> GridStateSnapshot:
        """Increment the origin's own slot of a tenant's spend counter."""
        counter = self.state.spend.get(tenant, GCounter())
        updated = counter.increment(self.origin, amount)
        if updated is counter:
            return self
        spend = dict(self.state.spend)
        spend[tenant] = updated
        revision = self.revision(Lane.STATE) + 1
        return self._next_state(replace(self.state, spend=spend), revision)

    def set_lane(self, lane: Lane, value: LaneValue) -> GridStateSnapshot:
        """Replace a non-state lane's value, bumping its revision when it changed."""
        if lane is Lane.STATE:
            raise ValueError("the state lane is written through its CRDT operations")
        if self.lane_value(lane) == value:
            return self
        return self.with_lane(lane, self.revision(lane) + 1, value)
