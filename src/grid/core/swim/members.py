"""The member table: who we know, in which state, and whom to probe next.

A `Member` is an immutable record; every change replaces it, so tables may
share records safely (a simulator can seed a thousand tables from one dict).
`MemberTable` keeps, besides the records, the structures the machine needs in
constant time per operation:

- the live list (alive and suspect members) for uniform random choices of
  ping-req helpers and push-pull partners;
- the probe order, a random permutation of live members walked one per probe
  round and reshuffled when exhausted (SWIM's round-robin probing, which bounds
  the time until any member is probed by every other);
- a tombstone queue of dead and left members in order of death, reaped after
  the retention time without scanning the table.

The local member is not in its own table; the machine tracks itself.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from grid.core.swim.messages import Alive, Dead, MemberUpdate, Suspect


class MemberState(StrEnum):
    """The SWIM state of a member as seen locally."""

    ALIVE = "alive"
    SUSPECT = "suspect"
    DEAD = "dead"
    LEFT = "left"

    @property
    def live(self) -> bool:
        """Alive and suspect members are probed and count toward n."""
        return self is MemberState.ALIVE or self is MemberState.SUSPECT


@dataclass(frozen=True, slots=True)
class Member:
    """One member's last known identity, address, incarnation and state."""

    id: str
    address: str
    incarnation: int
    state: MemberState
    accuser: str = ""
    changed_at: float = 0.0
    update: MemberUpdate = field(init=False, repr=False, compare=False)
    """The gossip message stating this record (built once; push-pull sends it)."""
    live: bool = field(init=False, repr=False, compare=False)
    """Alive or suspect (`state.live`, stored for the hot paths)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "live", self.state.live)
        update: MemberUpdate
        if self.state is MemberState.ALIVE:
            update = Alive(self.id, self.address, self.incarnation)
        elif self.state is MemberState.SUSPECT:
            update = Suspect(self.id, self.address, self.incarnation, self.accuser)
        else:
            accuser = self.id if self.state is MemberState.LEFT else self.accuser
            update = Dead(self.id, self.address, self.incarnation, accuser)
        object.__setattr__(self, "update", update)

    def as_update(self) -> MemberUpdate:
        """The gossip message that states this record (used by push-pull)."""
        return self.update


def permutation(ids: list[str], rng: random.Random) -> list[str]:
    """A uniformly random permutation of `ids`.

    Sorting by one random key each is several times faster than
    `random.shuffle` in CPython and just as uniform (key ties have
    probability ~2^-53 and are broken by id).
    """
    draw = rng.random
    return [member_id for _, member_id in sorted([(draw(), member_id) for member_id in ids])]


class MemberTable:
    """Members by id, plus the live list, probe order and tombstone queue."""

    __slots__ = (
        "_live",
        "_live_pos",
        "_members",
        "_order",
        "_order_index",
        "_suspects",
        "_tombstones",
    )

    def __init__(self) -> None:
        self._members: dict[str, Member] = {}
        self._live: list[str] = []
        self._live_pos: dict[str, int] = {}
        self._order: list[str] = []
        self._order_index = 0
        self._suspects = 0
        self._tombstones: deque[tuple[float, str]] = deque()

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[Member]:
        return iter(self._members.values())

    @property
    def records(self) -> dict[str, Member]:
        """The records by id, for read-only fast paths (do not mutate)."""
        return self._members

    def get(self, member_id: str) -> Member | None:
        """The record of `member_id`, or None when unknown (or reaped)."""
        return self._members.get(member_id)

    @property
    def live_count(self) -> int:
        """Alive plus suspect members (the local member excluded)."""
        return len(self._live)

    @property
    def suspect_count(self) -> int:
        """Suspect members."""
        return self._suspects

    def put(self, member: Member, rng: random.Random) -> None:
        """Insert or replace a record, keeping every index consistent."""
        old = self._members.get(member.id)
        self._members[member.id] = member
        was_live = old is not None and old.live
        if member.live and not was_live:
            self._add_live(member.id, rng)
        elif was_live and not member.live:
            self._remove_live(member.id)
        if not member.live:
            self._tombstones.append((member.changed_at, member.id))
        suspect = MemberState.SUSPECT
        self._suspects += (member.state is suspect) - (old is not None and old.state is suspect)

    def load(self, members: dict[str, Member], rng: random.Random) -> None:
        """Replace an empty table with `members` in bulk (restore or simulation)."""
        if self._members:
            raise RuntimeError("load() needs an empty table")
        self._members = dict(members)
        records = self._members.values()
        self._live = [m.id for m in records if m.live]
        self._live_pos = dict(zip(self._live, range(len(self._live)), strict=True))
        if len(self._live) < len(self._members):
            dead = sorted((m.changed_at, m.id) for m in records if not m.live)
            self._tombstones.extend(dead)
        self._suspects = [m.state for m in records].count(MemberState.SUSPECT)
        self._order = permutation(self._live, rng)

    def _add_live(self, member_id: str, rng: random.Random) -> None:
        self._live_pos[member_id] = len(self._live)
        self._live.append(member_id)
        # A newcomer joins the current permutation at a random remaining slot,
        # so it is probed within this round rather than only after a reshuffle.
        start = self._order_index
        slot = start + int(rng.random() * (len(self._order) - start + 1))
        self._order.insert(slot, member_id)

    def _remove_live(self, member_id: str) -> None:
        pos = self._live_pos.pop(member_id)
        last = self._live.pop()
        if last != member_id:
            self._live[pos] = last
            self._live_pos[last] = pos
        # The probe order drops the member lazily, when the walk reaches it.

    def next_probe_target(self, rng: random.Random) -> Member | None:
        """The next live member of the permutation, reshuffling when exhausted."""
        for _ in range(2):
            while self._order_index < len(self._order):
                member = self._members.get(self._order[self._order_index])
                self._order_index += 1
                if member is not None and member.live:
                    return member
            self._order = permutation(self._live, rng)
            self._order_index = 0
            if not self._order:
                return None
        return None

    def random_live(
        self, rng: random.Random, count: int, exclude: str = "", alive_only: bool = True
    ) -> list[Member]:
        """Up to `count` distinct random live members, skipping `exclude`.

        Rejection sampling keeps this O(count) for large tables; small tables
        (or a shortage of eligible members) fall back to one shuffled scan.
        """
        live = self._live
        picked: dict[str, Member] = {}
        attempts = 4 * count + 8
        while len(picked) < count and attempts > 0 and live:
            attempts -= 1
            member = self._members[live[rng.randrange(len(live))]]
            if self._eligible(member, exclude, alive_only):
                picked[member.id] = member
        if len(picked) < count:
            pool = list(live)
            rng.shuffle(pool)
            for member_id in pool:
                if len(picked) >= count:
                    break
                member = self._members[member_id]
                if member_id not in picked and self._eligible(member, exclude, alive_only):
                    picked[member_id] = member
        return list(picked.values())

    def gossip_targets(
        self, rng: random.Random, count: int, now: float, dead_window_s: float
    ) -> list[Member]:
        """Up to `count` distinct random live members or members dead < `dead_window_s`.

        memberlist's gossip peer choice: live members, plus members declared
        dead (not left) recently enough that telling them lets them refute.
        """
        recent: dict[str, Member] = {}
        if dead_window_s > 0:
            for changed_at, member_id in reversed(self._tombstones):
                if changed_at + dead_window_s <= now:
                    break
                member = self._members.get(member_id)
                if member is None or member.state is not MemberState.DEAD:
                    continue
                if member.changed_at + dead_window_s > now:
                    recent[member_id] = member
        if not recent:
            return self.random_live(rng, count, alive_only=False)
        live = self._live
        dead = list(recent.values())
        total = len(live) + len(dead)
        picks = rng.sample(range(total), min(count, total))
        return [self._members[live[i]] if i < len(live) else dead[i - len(live)] for i in picks]

    @staticmethod
    def _eligible(member: Member, exclude: str, alive_only: bool) -> bool:
        if member.id == exclude:
            return False
        return member.state is MemberState.ALIVE or not alive_only

    def evict_tombstone(self) -> bool:
        """Forget the oldest tombstone early, to make room; False when there is none."""
        tombstones = self._tombstones
        while tombstones:
            changed_at, member_id = tombstones.popleft()
            member = self._members.get(member_id)
            if member is not None and not member.live and member.changed_at == changed_at:
                del self._members[member_id]
                return True
        return False

    def reap(self, now: float, retention_s: float) -> list[str]:
        """Forget tombstones older than `retention_s`; returns the ids removed."""
        removed: list[str] = []
        while self._tombstones and self._tombstones[0][0] + retention_s <= now:
            _, member_id = self._tombstones.popleft()
            member = self._members.get(member_id)
            # A member that came back to life, or died again later, has a
            # newer record; only the record this tombstone names is reaped.
            stale = member is not None and not member.live
            if stale and member is not None and member.changed_at + retention_s <= now:
                del self._members[member_id]
                removed.append(member_id)
        return removed
