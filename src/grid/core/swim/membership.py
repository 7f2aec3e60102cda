"""The local view of the cluster and SWIM's rules for changing it.

`Membership` holds what one member believes: its own incarnation, the member
table, the running suspicions, the piggyback queue, the newest broadcast item
per (origin, lane) and the local health multiplier. Its `apply` encodes SWIM's
precedence of member updates (with memberlist's refinements):

- Alive(i) replaces any record of a lower incarnation, reviving a suspect (a
  refutation) or a tombstone (a rejoin).
- Suspect(i) of a live member at incarnation >= its own starts a suspicion,
  or, at the same incarnation, counts as an independent confirmation.
- Dead(i) at incarnation >= the record's ends the member: Left when the member
  declared it itself (accuser == member), Dead otherwise.
- Gossip about ourselves that says we are suspect or dead, or alive at a higher
  incarnation than ours, is refuted by raising our incarnation and gossiping
  Alive; being accused also raises the local health multiplier (Lifeguard).

Every accepted change is re-gossiped (piggybacked) unless the caller says not
to, and reported to the owner as a `Notify` when the state changed.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Sequence
from typing import assert_never

from grid.core.swim.admission import AdmissionCounters, Applicants, MemberVouch
from grid.core.swim.config import SwimConfig
from grid.core.swim.dissemination import (
    DATAGRAM_HEADROOM_BYTES,
    PART_OVERHEAD_BYTES,
    DisseminationQueue,
    SizeEstimator,
)
from grid.core.swim.effects import (
    Deliver,
    Effect,
    EventKind,
    Notify,
    Schedule,
    Send,
    SuspicionTimeout,
)
from grid.core.swim.health import LocalHealth
from grid.core.swim.members import Member, MemberState, MemberTable
from grid.core.swim.messages import (
    Alive,
    BroadcastItem,
    Datagram,
    Dead,
    Lane,
    MemberUpdate,
    PushPull,
    Suspect,
)
from grid.core.swim.oversize import OversizeRelay
from grid.core.swim.suspicion import Suspicion

ItemAdmission = Callable[[BroadcastItem], Sequence[BroadcastItem]]
"""The owner's verdict on a received item: the items to hold and relay because of
it (the item itself once merged, items it released, or our own re-asserted
item); empty when it was dropped or must wait. Without one every newer item is
held, as plain SWIM does."""


class Membership:
    """One member's view of the cluster and the rules that change it."""

    def __init__(
        self,
        node_id: str,
        address: str,
        incarnation: int,
        config: SwimConfig,
        rng: random.Random,
        size_of: SizeEstimator,
        counters: AdmissionCounters,
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.incarnation = incarnation
        self.config = config
        self.rng = rng
        self.size_of = size_of
        self.table = MemberTable()
        self.suspicions: dict[str, Suspicion] = {}
        self.queue = self.new_queue()
        self.gossip_queue = self.new_queue()
        self.items: dict[tuple[str, Lane], BroadcastItem] = {}
        self.admit: ItemAdmission | None = None
        self.vouch: MemberVouch | None = None
        self.applicants = Applicants(self.me, config, rng, counters)
        self.health = LocalHealth(config.awareness_max_multiplier)
        self.oversize = OversizeRelay(config.oversize_push_pull_interval_s)
        self._limits: dict[int, int] = {}

    def me(self) -> Alive:
        """Our own Alive at our current incarnation."""
        return Alive(self.node_id, self.address, self.incarnation)

    def new_queue(self) -> DisseminationQueue:
        """An empty piggyback queue sized to the datagram budget."""
        return DisseminationQueue(self.config.datagram_budget_bytes - DATAGRAM_HEADROOM_BYTES)

    def reset_queues(self) -> None:
        """Drop everything queued (we left)."""
        self.queue = self.new_queue()
        self.gossip_queue = self.new_queue()
        self.oversize.clear()

    def retransmit_limit(self) -> int:
        """λ·⌈log10(n + 1)⌉ for the current n (live members plus ourselves)."""
        n = self.table.live_count + 1
        limit = self._limits.get(n)
        if limit is None:
            limit = self._limits[n] = self.config.retransmit_limit(n)
        return limit

    def gossip(self, update: MemberUpdate) -> None:
        """Queue `update` for piggybacking, replacing older gossip about its member.

        News goes into two queues with separate retransmit budgets: the one
        probe traffic (pings, acks) piggybacks, and the one gossip ticks send.
        Gossip ticks push news to random members within a second but exhaust
        their budget as fast; probe traffic also pulls (a member that pings a
        holder gets the news on the ack), so keeping its own budget keeps the
        coverage probe-only dissemination had: gossip adds speed, not risk.
        """
        size = self.size_of(update)
        self.queue.enqueue_update(update, size)
        if self.config.gossip_interval_s > 0:
            self.gossip_queue.enqueue_update(update, size)

    def queue_item(self, item: BroadcastItem) -> None:
        """Queue `item` in both queues (see `gossip`).

        An item too large for any datagram owes push-pull rounds instead
        (`grid.core.swim.oversize`).
        """
        size = self.size_of(item)
        cfg = self.config
        if size + PART_OVERHEAD_BYTES > cfg.datagram_budget_bytes - DATAGRAM_HEADROOM_BYTES:
            self.oversize.owe(item, cfg.oversize_rounds(self.table.live_count + 1))
        self.queue.enqueue_item(item, size)
        if self.config.gossip_interval_s > 0:
            self.gossip_queue.enqueue_item(item, size)

    def send(
        self,
        address: str,
        message: Datagram,
        lead: tuple[MemberUpdate, ...] = (),
        *,
        gossip: bool = False,
    ) -> Send:
        """A datagram with as much piggyback as the budget allows after `lead`.

        Gossip-tick datagrams take from the gossip queue, all others from the
        probe-traffic queue (`gossip` says why there are two).
        """
        queue = self.gossip_queue if gossip else self.queue
        size_of = self.size_of
        budget = self.config.datagram_budget_bytes - size_of(message)
        for update in lead:
            budget -= size_of(update) + PART_OVERHEAD_BYTES
        pick = queue.select(budget, self.retransmit_limit())
        if not (lead or pick.updates or pick.items):
            return Send(address, message)
        picked = pick.updates
        if lead and picked:
            picked = [update for update in picked if update not in lead]
        updates = lead + tuple(picked)
        message = dataclasses.replace(message, updates=updates, items=tuple(pick.items))
        return Send(address, message)

    # -- absorbing gossip ----------------------------------------------------

    def absorb(
        self,
        updates: Iterable[MemberUpdate],
        items: Iterable[BroadcastItem],
        now: float,
        out: list[Effect],
        gossip: bool,
        trusted: bool = False,
    ) -> None:
        """Apply piggybacked updates and items in order (`apply` says what `trusted` means)."""
        records = self.table.records
        for update in updates:
            # Fast path: most gossip repeats what we already hold.
            if type(update) is Alive:
                local = records.get(update.member)
                if local is not None and update.incarnation <= local.incarnation:
                    continue
            self.apply(update, now, out, gossip, trusted)
        for item in items:
            self.learn_item(item, out, gossip)

    def merge(
        self, remote: PushPull, now: float, out: list[Effect], *, trusted: bool = False
    ) -> list[str]:
        """Absorb a push-pull's member table and items; returns the members newly alive.

        A `trusted` table (a seed's reply to us) admits the members it lists;
        any other only makes them applicants (`grid.core.swim.admission`).

        What we learn is re-gossiped, as with any news: members that knew it
        already stay silent, so only re-gossip keeps the epidemic going. A
        remote Dead (not Left) of a member we hold live only makes us suspect
        it, so a member wrongly buried (say, across a partition) gets the
        chance to refute.
        """
        records = self.table.records
        updates: list[MemberUpdate] = []
        unknown: list[str] = []
        for update in remote.members:
            local = records.get(update.member)
            live = local is not None and local.live
            if type(update) is Alive and not live and update.member != self.node_id:
                unknown.append(update.member)
            elif type(update) is Dead and not update.left and live:
                update = Suspect(update.member, update.address, update.incarnation, remote.source)
            updates.append(update)
        self.absorb(updates, remote.items, now, out, gossip=True, trusted=trusted)
        self.oversize.held_by(remote.source, remote.items)
        alive = MemberState.ALIVE
        return [
            member_id
            for member_id in unknown
            if (member := records.get(member_id)) is not None and member.state is alive
        ]

    def learn_item(self, item: BroadcastItem, out: list[Effect], gossip: bool) -> None:
        """Keep and deliver `item` when it is newer than its (origin, lane)'s.

        With an `admit` verdict, only what it returns is kept: an item the owner
        refused never occupies its (origin, lane), so a forged high revision
        cannot shadow the origin's real items.
        """
        known = self.items.get((item.origin, item.lane))
        if known is not None and item.revision <= known.revision:
            return
        if self.admit is None:
            self.hold_item(item, out, gossip)
            return
        for held in self.admit(item):
            self.hold_item(held, out, gossip)

    def hold_item(self, item: BroadcastItem, out: list[Effect], gossip: bool) -> None:
        """Hold a newer item for its (origin, lane) and pass it on."""
        key = (item.origin, item.lane)
        known = self.items.get(key)
        if known is not None and item.revision <= known.revision:
            return
        self.items[key] = item
        if item.origin == self.node_id:
            self.queue_item(item)  # our own lane, re-asserted: spread it
            return
        out.append(Deliver(item))
        if gossip:
            self.queue_item(item)

    def apply(
        self,
        update: MemberUpdate,
        now: float,
        out: list[Effect],
        gossip: bool,
        trusted: bool = False,
    ) -> None:
        """Apply one member update under SWIM's precedence rules.

        An `Alive` of a member not in the table, or at another address, is
        taken only when `trusted` (it proved itself, or a trusted table lists
        it) or vouched for; otherwise it waits among the applicants.
        Accusations count only from ourselves and members in the table.
        """
        match update:
            case Alive():
                self._on_alive(update, now, out, gossip, trusted)
            case Suspect():
                self._on_suspect(update, now, out, gossip)
            case Dead():
                self._on_dead(update, now, out, gossip)
            case _:
                assert_never(update)

    def _on_alive(
        self, alive: Alive, now: float, out: list[Effect], gossip: bool, trusted: bool
    ) -> None:
        local = self.table.get(alive.member)
        if local is not None and alive.incarnation <= local.incarnation:
            return
        if alive.member == self.node_id:
            newer = alive.incarnation > self.incarnation
            if newer or (alive.incarnation == self.incarnation and alive.address != self.address):
                self.refute(alive.incarnation, penalize=False)
            return
        moved = local is None or local.address != alive.address
        if moved and not self._admissible(alive, local is None, trusted, now, out):
            return
        record = Member(alive.member, alive.address, alive.incarnation, MemberState.ALIVE, "", now)
        self.table.put(record, self.rng)
        self.suspicions.pop(alive.member, None)
        if local is None or local.state is not MemberState.ALIVE or local.address != alive.address:
            out.append(Notify(EventKind.ALIVE, alive.member, alive.address, alive.incarnation))
        if gossip:
            self.gossip(alive)

    def _admissible(
        self, alive: Alive, new: bool, trusted: bool, now: float, out: list[Effect]
    ) -> bool:
        """Whether an announcement of a new member (or new address) may enter the table."""
        counters = self.applicants.counters
        vouched = False
        if not trusted:
            vouch = self.vouch
            vouched = new and vouch is not None and vouch(alive)
            if not vouched:
                self.applicants.consider(alive, now, out)
                return False
        table = self.table
        if new and len(table) >= self.config.member_table_max and not table.evict_tombstone():
            counters.refused["table_full"] += 1
            return False
        counters.vouched += vouched
        return True

    def _may_accuse(self, accuser: str) -> bool:
        """Only we and members in the table accuse: an applicant cannot."""
        return accuser == self.node_id or accuser in self.table.records

    def _on_suspect(self, suspect: Suspect, now: float, out: list[Effect], gossip: bool) -> None:
        if suspect.member == self.node_id:
            if suspect.incarnation >= self.incarnation:
                # Refuting is always safe; only a member's accusation hints at our health.
                self.refute(suspect.incarnation, penalize=self._may_accuse(suspect.accuser))
            return
        local = self.table.get(suspect.member)
        if local is None or suspect.incarnation < local.incarnation or not local.live:
            return
        if not self._may_accuse(suspect.accuser):
            return
        current = self.suspicions.get(suspect.member)
        if current is not None and current.incarnation == suspect.incarnation:
            # An independent confirmation shortens the timer; pass it on so
            # other members can count it too.
            if current.confirm(suspect.accuser):
                timer = SuspicionTimeout(suspect.member, suspect.incarnation)
                out.append(Schedule(timer, current.deadline))
                if gossip:
                    self.gossip(suspect)
            return
        suspicion = self._start_suspicion(suspect, now)
        record = dataclasses.replace(
            local,
            incarnation=suspect.incarnation,
            state=MemberState.SUSPECT,
            accuser=suspect.accuser,
            changed_at=now,
        )
        self.table.put(record, self.rng)
        if local.state is MemberState.ALIVE:
            out.append(Notify(EventKind.SUSPECT, local.id, local.address, suspect.incarnation))
        timer = SuspicionTimeout(suspect.member, suspect.incarnation)
        out.append(Schedule(timer, suspicion.deadline))
        if gossip:
            self.gossip(suspect)

    def _start_suspicion(self, suspect: Suspect, now: float) -> Suspicion:
        cfg = self.config
        # K confirmations can only come from members other than us and the
        # suspect; with fewer of them, the timer starts at the minimum.
        others = self.table.live_count - 1
        wanted = cfg.suspicion_confirmations
        k = wanted if others >= wanted else 0
        suspicion = Suspicion(
            suspect.accuser,
            suspect.incarnation,
            k,
            cfg.suspicion_timeout_s,
            cfg.suspicion_max_s,
            now,
        )
        self.suspicions[suspect.member] = suspicion
        return suspicion

    def _on_dead(self, dead: Dead, now: float, out: list[Effect], gossip: bool) -> None:
        if dead.member == self.node_id:
            if dead.incarnation >= self.incarnation:
                self.refute(dead.incarnation, penalize=self._may_accuse(dead.accuser))
            return
        local = self.table.get(dead.member)
        if local is None or dead.incarnation < local.incarnation:
            return
        if not self._may_accuse(dead.accuser):
            return
        if not local.live and dead.incarnation == local.incarnation:
            return
        state = MemberState.LEFT if dead.left else MemberState.DEAD
        self.suspicions.pop(dead.member, None)
        record = Member(dead.member, local.address, dead.incarnation, state, dead.accuser, now)
        self.table.put(record, self.rng)
        if local.state is not state:
            kind = EventKind.LEFT if dead.left else EventKind.DEAD
            out.append(Notify(kind, local.id, local.address, dead.incarnation))
        if gossip:
            self.gossip(dead)

    def refute(self, incarnation: int, *, penalize: bool) -> None:
        """Raise our incarnation above `incarnation` and gossip that we live."""
        self.incarnation = max(self.incarnation, incarnation) + 1
        self.gossip(self.me())
        if penalize:
            self.health.apply(1)  # Lifeguard: being accused hints that we are the slow one
