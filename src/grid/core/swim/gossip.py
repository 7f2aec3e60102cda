"""Gossip ticks' timing, and direct introductions so every member hears our Alive.

`GossipClock` times the gossip tick: armed only while news waits, always on
one phase drawn at join, so news waits half an interval on average, as with
memberlist's free-running ticker, while a quiet member sets no timer at all.

Infection-style gossip reaches each member only with high probability. Every
holder sends an update λ·⌈log10(n + 1)⌉ times, so now and then one member misses
a join (about one join in ten at n = 8 through one seed, with λ = 4) or a
refutation, and would learn it only from the next periodic push-pull, up to
`push_pull_interval_s` later.

`Introductions` closes that gap at one small update per member: the first
datagram of ours to each member since our incarnation last changed (a join, a
rejoin or a refutation) leads with our own Alive. Probes walk every member once
per round-robin cycle, which bounds the gap by one cycle. Members we first hear
of through push-pull (every member, when we join through a seed) most likely
know nothing of us yet, so they are also owed an introduction, which gossip
ticks pay, `gossip_nodes` members per tick, well before any probe cycle ends.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

from grid.core.swim.members import Member, MemberState, MemberTable
from grid.core.swim.messages import Alive, MemberUpdate

TICK_TOLERANCE_S = 1e-6
"""A tick this close to now is taken as now: the next one is a full interval on."""


class GossipClock:
    """When the next gossip tick is due; at most one tick is pending."""

    __slots__ = ("armed", "interval_s", "phase")

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.armed = False
        self.phase = 0.0

    def restart(self, phase: float) -> None:
        """Forget any pending tick (a new epoch) and tick on `phase` from now on."""
        self.armed = False
        self.phase = phase

    def arm(self, now: float) -> float | None:
        """The next tick on the phase after `now`, or None when one is pending or disabled."""
        interval = self.interval_s
        if self.armed or interval <= 0:
            return None
        self.armed = True
        at = self.phase + math.ceil((now - self.phase) / interval) * interval
        return at + interval if at <= now + TICK_TOLERANCE_S else at


class Introductions:
    """Who heard our current Alive from us directly, and whom we still owe it."""

    __slots__ = ("_announced", "_incarnation", "_owed")

    def __init__(self) -> None:
        self._announced: set[str] = set()
        self._incarnation = -1
        self._owed: deque[str] = deque()

    def __bool__(self) -> bool:
        """True while introductions are owed."""
        return bool(self._owed)

    def lead(self, me: Alive, target: str) -> tuple[MemberUpdate, ...]:
        """`(me,)` when `target` has not had it from us at this incarnation, else `()`."""
        if me.incarnation != self._incarnation:
            self._incarnation = me.incarnation
            self._announced.clear()
        if target in self._announced:
            return ()
        self._announced.add(target)
        return (me,)

    def owe(self, member_ids: Iterable[str]) -> None:
        """Owe an introduction to each of `member_ids` (learned through push-pull)."""
        self._owed.extend(member_ids)

    def due(self, me: Alive, table: MemberTable, count: int) -> list[tuple[Member, MemberUpdate]]:
        """Up to `count` owed alive members, each with the lead to send it."""
        due: list[tuple[Member, MemberUpdate]] = []
        owed = self._owed
        while owed and len(due) < count:
            member = table.get(owed.popleft())
            if member is None or member.state is not MemberState.ALIVE:
                continue
            lead = self.lead(me, member.id)
            if lead:
                due.append((member, lead[0]))
        return due

    def clear(self) -> None:
        """Forget what is owed (we left)."""
        self._owed.clear()
