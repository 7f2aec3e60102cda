"""Items too large for a datagram, spread by prompt push-pull instead of waiting.

A broadcast item larger than a datagram's room (a site's state lane once it
carries enough provider records) is never piggybacked
(`grid.core.swim.dissemination`). Left to the periodic push-pull it would
reach a peer up to `push_pull_interval_s` (30 s) late, and with it everything
else in that lane, such as the site's spend slot.

`OversizeRelay` gives such items their own infection instead. Every member
that holds a newer oversize item (its own, or one it learned) owes it
`rounds` push-pull rounds, ⌈log10(n + 1)⌉ as for piggyback news but without
λ, since each round is a reliable TCP exchange that also pulls. A round
exchanges our state with up to `gossip_nodes` random live members that are not
yet known to hold every owed item, and rounds are at least
`oversize_push_pull_interval_s` apart, so a lane that changes every second
costs one round per interval, whatever the number of changes.

A member is known to hold an item when a push-pull of its carried that item
(or a newer one) or when we exchanged with it since the item arrived. An item
whose every live member is a known holder owes nothing more. The periodic
push-pull remains the repair for whatever a failed exchange missed.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from grid.core.swim.members import Member, MemberTable
from grid.core.swim.messages import BroadcastItem, Lane

ItemKey = tuple[str, Lane]


@dataclass(slots=True)
class _Owed:
    revision: int
    rounds: int
    holders: set[str] = field(default_factory=set)


class OversizeRelay:
    """Which oversize items still owe push-pull rounds, and when the next may go."""

    __slots__ = ("_last_at", "_owed", "armed", "interval_s")

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.armed = False
        self._last_at: float | None = None
        self._owed: dict[ItemKey, _Owed] = {}

    def __bool__(self) -> bool:
        """True while some item owes a round."""
        return bool(self._owed)

    def owe(self, item: BroadcastItem, rounds: int) -> None:
        """`item` is newer than what we held for its (origin, lane): owe it `rounds`."""
        if self.interval_s <= 0:
            return
        key = (item.origin, item.lane)
        known = self._owed.get(key)
        if known is not None and known.revision >= item.revision:
            return
        self._owed[key] = _Owed(item.revision, max(1, rounds))

    def held_by(self, member: str, items: Iterable[BroadcastItem]) -> None:
        """A push-pull from `member` carried `items`: it holds those it carried."""
        owed = self._owed
        if not owed:
            return
        for item in items:
            entry = owed.get((item.origin, item.lane))
            if entry is not None and item.revision >= entry.revision:
                entry.holders.add(member)

    def wants(self, member: str) -> bool:
        """Whether `member` is not yet known to hold some owed item."""
        return any(member not in entry.holders for entry in self._owed.values())

    def arm(self, now: float) -> float | None:
        """When the next round may go, or None when one is pending or nothing is owed."""
        if self.armed or not self._owed:
            return None
        self.armed = True
        if self._last_at is None:
            return now
        return max(now, self._last_at + self.interval_s)

    def round(
        self, now: float, table: MemberTable, rng: random.Random, fanout: int
    ) -> list[Member]:
        """Take a round: up to `fanout` random alive members that want an owed item.

        Counts the round against every owed item, takes the partners as holders,
        and drops what every live member holds.
        """
        self.armed = False
        self._last_at = now
        candidates = table.random_live(rng, len(table))
        partners = [m for m in candidates if self.wants(m.id)][: max(1, fanout)]
        chosen = {m.id for m in partners}
        live = {m.id for m in table if m.live}
        for key, entry in list(self._owed.items()):
            entry.holders |= chosen
            entry.rounds -= 1
            if entry.rounds <= 0 or live <= entry.holders:
                del self._owed[key]
        return partners

    def clear(self) -> None:
        """Forget what is owed (we left)."""
        self._owed.clear()
        self.armed = False
