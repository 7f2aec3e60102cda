"""The SWIM membership machine with the Lifeguard refinements, sans I/O.

`SwimMachine` is a pure, synchronous state machine that owns the member table,
the suspicion timers, the piggyback queue and the newest item per (origin,
lane). It reads no clock, opens no socket and draws randomness only from the
injected `random.Random`; one task owns it, so it needs no locks.

Inputs (each takes `now`, seconds on the adapter's monotonic clock):

- `join(seeds, now)`: start (or restart) membership; push-pull with each seed.
- `leave(now)`: announce a graceful leave and stop.
- `handle_packet(src_address, message, now)`: a decoded datagram.
- `handle_timer(timer, now)`: a timer scheduled earlier is due.
- `handle_push_pull(request, now)`: a peer's anti-entropy request; (reply, effects).
- `handle_push_pull_reply(reply, now)`: the reply to a `PushPullRequest` of ours.
- `publish(item, now)`: an item of ours to disseminate (its revision must grow).
- `forget_origin(origin)`, `restore(members)`: owner housekeeping.

`admit`, when given, judges every received item newer than the one held for
its (origin, lane) before the machine holds, delivers or relays anything
(`grid.core.crdt.sync.admission` wires a CRDT replica in): a refused item
leaves no trace, so it can neither shadow later items nor spread.

Each input returns effects (see `grid.core.swim.effects`): `Send`, `Schedule`,
`Notify`, `Deliver` and `PushPullRequest`; `grid.core.swim.runtime.Driver` calls
the inputs and carries out the effects.

The probe cycle (ping, ping-req, nack, suspect, with Lifeguard's local health)
is `grid.core.swim.probing`, suspicion timeouts `grid.core.swim.suspicion`, and
the rounds of items too large for a datagram `grid.core.swim.oversize`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from enum import StrEnum
from typing import assert_never

from grid.core.swim.admission import AdmissionCounters, MemberVouch
from grid.core.swim.anti_entropy import reply_to
from grid.core.swim.config import SwimConfig
from grid.core.swim.dissemination import SizeEstimator
from grid.core.swim.effects import (
    Effect,
    GossipTick,
    OversizeTick,
    ProbeTick,
    ProbeTimeout,
    ProofTick,
    ProofTimeout,
    PushPullRequest,
    PushPullTick,
    RelayTimeout,
    Schedule,
    Send,
    SuspicionTimeout,
    Timer,
)
from grid.core.swim.gossip import GossipClock, Introductions
from grid.core.swim.members import Member, MemberState
from grid.core.swim.membership import ItemAdmission, Membership
from grid.core.swim.messages import (
    Ack,
    Alive,
    BroadcastItem,
    Datagram,
    Dead,
    Gossip,
    MemberUpdate,
    Nack,
    Ping,
    PingReq,
    PushPull,
)
from grid.core.swim.probing import Prober
from grid.errors import TransitionError, ValidationError

TIMER_TOLERANCE_S = 1e-6
"""A timer that fires this early still counts as due (clock rounding)."""


class NodeStatus(StrEnum):
    """The lifecycle of the local member."""

    IDLE = "idle"
    JOINED = "joined"
    LEFT = "left"


class SwimMachine:
    """SWIM + Lifeguard membership and lane dissemination for one member."""

    def __init__(
        self,
        node_id: str,
        address: str,
        *,
        rng: random.Random,
        size_of: SizeEstimator,
        config: SwimConfig | None = None,
        incarnation: int = 0,
        admit: ItemAdmission | None = None,
        vouch: MemberVouch | None = None,
        counters: AdmissionCounters | None = None,
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.config = config or SwimConfig()
        self.status = NodeStatus.IDLE
        self._rng = rng
        self.admission = counters or AdmissionCounters()
        """How announced members were admitted or refused (`grid.core.swim.admission`)."""
        view = Membership(node_id, address, incarnation, self.config, rng, size_of, self.admission)
        self._view = view
        view.admit = admit
        view.vouch = vouch
        self._members = self._view.table
        self._seq = rng.getrandbits(31)
        self._prober = Prober(
            node_id, self.config, rng, self._view, self._view.send, self._next_seq
        )
        self._epoch = 0
        self._seeds: tuple[str, ...] = ()
        self._gossip = GossipClock(self.config.gossip_interval_s)
        self._introductions = Introductions()

    # -- views -------------------------------------------------------------

    @property
    def incarnation(self) -> int:
        """Our own incarnation number."""
        return self._view.incarnation

    @property
    def local_health(self) -> int:
        """The Lifeguard local health multiplier (LHM), 0 when healthy."""
        return self._view.health.score

    def member(self, member_id: str) -> Member | None:
        """The local view of one member (None when unknown or reaped)."""
        return self._members.get(member_id)

    def members(self) -> list[Member]:
        """Every member record, tombstones included, the local member excluded."""
        return list(self._members)

    @property
    def live_count(self) -> int:
        """Alive and suspect members known, the local member excluded."""
        return self._members.live_count

    @property
    def suspect_count(self) -> int:
        """Members currently held suspect."""
        return self._members.suspect_count

    @property
    def unproven_count(self) -> int:
        """Announced members waiting to prove themselves (not in the table)."""
        return len(self._view.applicants)

    def known_items(self) -> list[BroadcastItem]:
        """The newest item held per (origin, lane)."""
        return list(self._view.items.values())

    def queued(self) -> int:
        """How many updates and items wait to be piggybacked."""
        return len(self._view.queue)

    def transmits_of(self, member_id: str) -> int | None:
        """How often the queued gossip about `member_id` was sent, if queued."""
        return self._view.queue.transmits(("m", member_id))

    def restore(self, members: dict[str, Member]) -> None:
        """Load a known member table before joining (persisted state, simulations)."""
        if self.status is not NodeStatus.IDLE:
            raise TransitionError("restore() is only allowed before join()")
        table = dict(members)
        table.pop(self.node_id, None)
        self._members.load(table, self._rng)

    # -- lifecycle ---------------------------------------------------------

    def join(self, seeds: Iterable[str], now: float) -> list[Effect]:
        """Join through `seeds` (addresses); with none, start a new cluster.

        A member that left before rejoins with a higher incarnation, so its
        Alive overrides the Dead(left) its peers hold.
        """
        if self.status is NodeStatus.JOINED:
            raise TransitionError("already joined")
        view = self._view
        if self.status is NodeStatus.LEFT:
            view.incarnation += 1
        self.status = NodeStatus.JOINED
        self._epoch += 1
        self._gossip.restart(now + self._rng.uniform(0.0, self.config.gossip_interval_s))
        self._seeds = tuple(seed for seed in seeds if seed != self.address)
        view.gossip(view.me())
        cfg = self.config
        out: list[Effect] = [
            PushPullRequest(seed, self.push_pull_message(join=True)) for seed in self._seeds
        ]
        first_probe = now + self._rng.uniform(0.0, cfg.probe_interval_s)
        out.append(Schedule(ProbeTick(self._epoch), first_probe))
        if cfg.push_pull_interval_s > 0:
            interval = cfg.push_pull_interval(self._members.live_count + 1)
            first_sync = now + interval * self._rng.uniform(0.5, 1.5)
            out.append(Schedule(PushPullTick(self._epoch), first_sync))
        self._arm_gossip(now, out)
        return out

    def leave(self, now: float) -> list[Effect]:
        """Leave gracefully: tell peers directly that we left, then go quiet.

        Dead(self, accuser=self) at a raised incarnation makes peers mark us
        Left, not failed. It is sent straight to as many random members as one
        update's retransmit limit, since a left member no longer gossips.
        """
        if self.status is not NodeStatus.JOINED:
            return []
        view = self._view
        view.incarnation += 1
        farewell = Dead(self.node_id, self.address, view.incarnation, self.node_id)
        out: list[Effect] = []
        peers = self._members.random_live(self._rng, view.retransmit_limit(), alive_only=False)
        for peer in peers:
            ping = Ping(self._next_seq(), self.node_id, peer.id, updates=(farewell,))
            out.append(Send(peer.address, ping))
        self.status = NodeStatus.LEFT
        self._epoch += 1
        self._prober.clear()
        view.suspicions.clear()
        view.reset_queues()
        view.applicants.clear()
        self._introductions.clear()
        return out

    def publish(self, item: BroadcastItem, now: float | None = None) -> list[Effect]:
        """Disseminate an item of ours; its revision must exceed the last one.

        With `now`, returns the effects that start spreading it at once (the
        next gossip tick); without, it waits for the next input to arm it.
        """
        if item.origin != self.node_id:
            raise ValidationError("items are published by their origin only", path="origin")
        items = self._view.items
        known = items.get((item.origin, item.lane))
        if known is not None and item.revision <= known.revision:
            raise ValidationError(
                f"revision {item.revision} does not exceed {known.revision}", path="revision"
            )
        items[(item.origin, item.lane)] = item
        self._view.queue_item(item)
        out: list[Effect] = []
        if now is not None and self.status is NodeStatus.JOINED:
            self._arm_gossip(now, out)
        return out

    def forget_origin(self, origin: str) -> None:
        """Drop the items held for `origin` (the owner evicted that site).

        They leave push-pull replies at once; should the same items arrive
        again, they are delivered again, and the owner decides anew.
        """
        if origin == self.node_id:
            return
        items = self._view.items
        for key in [key for key in items if key[0] == origin]:
            del items[key]

    # -- datagrams ---------------------------------------------------------

    def handle_packet(self, src_address: str, message: Datagram, now: float) -> list[Effect]:
        """Absorb a datagram's piggyback, then answer it."""
        if self.status is not NodeStatus.JOINED:
            return []
        if isinstance(message, Ping) and message.target not in (None, self.node_id):
            return []  # meant for a previous owner of this address
        out: list[Effect] = []
        self._view.absorb(message.updates, message.items, now, out, gossip=True)
        match message:
            case Ping():
                out.append(
                    self._view.send(
                        src_address, Ack(message.seq, self.node_id), self._accusal(message)
                    )
                )
            case PingReq():
                self._prober.relay(src_address, message, now, out)
            case Ack():
                self._on_ack(message, now, out)
            case Nack():
                self._prober.on_nack(message)
            case Gossip():
                pass  # piggyback only, absorbed above
            case _:
                assert_never(message)
        self._arm_gossip(now, out)
        return out

    def _on_ack(self, ack: Ack, now: float, out: list[Effect]) -> None:
        """An ack for a probe, a relayed probe, or a challenge to an unproven member."""
        applicants = self._view.applicants
        if not applicants.owns(ack.seq):
            self._prober.on_ack(ack, out)
            return
        proven = applicants.on_ack(ack)
        if proven is not None:
            self._view.apply(proven, now, out, gossip=True, trusted=True)

    def _accusal(self, ping: Ping) -> tuple[MemberUpdate, ...]:
        """What we hold against the pinging member, to lead our ack with.

        The buddy system, applied to both directions: a member we hold suspect
        or dead learns it at once from our ack and can refute, instead of
        waiting for gossip or the next push-pull to bring the news.
        """
        sender = self._members.get(ping.source)
        if sender is None or sender.state is MemberState.ALIVE or sender.state is MemberState.LEFT:
            return ()
        return (sender.update,)

    # -- timers ------------------------------------------------------------

    def handle_timer(self, timer: Timer, now: float) -> list[Effect]:
        """A scheduled timer is due; stale timers are ignored."""
        if self.status is not NodeStatus.JOINED:
            return []
        out = self._on_timer(timer, now)
        self._arm_gossip(now, out)
        return out

    def _on_timer(self, timer: Timer, now: float) -> list[Effect]:
        current = self._epoch
        match timer:
            case ProbeTick(epoch=epoch):
                return self._on_probe_tick(timer, now) if epoch == current else []
            case GossipTick(epoch=epoch):
                return self._on_gossip_tick(now) if epoch == current else []
            case PushPullTick(epoch=epoch):
                return self._on_push_pull_tick(timer, now) if epoch == current else []
            case OversizeTick(epoch=epoch):
                return self._on_oversize_tick(now) if epoch == current else []
            case ProbeTimeout():
                return self._prober.on_probe_timeout(timer)
            case RelayTimeout():
                return self._prober.on_relay_timeout(timer)
            case SuspicionTimeout():
                return self._on_suspicion_timeout(timer, now)
            case ProofTimeout():
                return self._view.applicants.on_timeout(timer, now)
            case ProofTick():
                return self._view.applicants.on_tick(now)
            case _:
                assert_never(timer)

    def _arm_gossip(self, now: float, out: list[Effect]) -> None:
        """Schedule the next gossip tick, and oversize round, when one is due."""
        if self._members.live_count == 0:
            return
        oversize = self._view.oversize
        if oversize and (at := oversize.arm(now)) is not None:
            out.append(Schedule(OversizeTick(self._epoch), at))
        if not (self._view.gossip_queue or self._introductions):
            return
        at = self._gossip.arm(now)
        if at is not None:
            out.append(Schedule(GossipTick(self._epoch), at))

    def _on_probe_tick(self, timer: ProbeTick, now: float) -> list[Effect]:
        out: list[Effect] = []
        self._prober.conclude(now, out)
        self._members.reap(now, self.config.dead_retention_s)
        self._prober.probe_next(now, out, self._introduction)
        interval = self._view.health.scale(self.config.probe_interval_s)
        out.append(Schedule(timer, now + interval))
        return out

    def _on_gossip_tick(self, now: float) -> list[Effect]:
        """Send queued news to `gossip_nodes` random members (memberlist's gossip).

        Members we learned of through push-pull and owe an introduction get
        one, up to `gossip_nodes` more per tick (`grid.core.swim.gossip`).
        """
        self._gossip.armed = False
        out: list[Effect] = []
        cfg = self.config
        carrier = Gossip(self.node_id)
        if self._view.gossip_queue:
            targets = self._members.gossip_targets(
                self._rng, cfg.gossip_nodes, now, cfg.gossip_to_dead_s
            )
            for target in targets:
                lead = self._introduction(target.id)
                send = self._view.send(target.address, carrier, lead, gossip=True)
                if send.message is carrier:
                    break  # the queue ran dry
                out.append(send)
        me = self._me()
        for member, alive in self._introductions.due(me, self._members, max(1, cfg.gossip_nodes)):
            out.append(self._view.send(member.address, carrier, (alive,), gossip=True))
        return out

    def _me(self) -> Alive:
        return self._view.me()

    def _introduction(self, target: str) -> tuple[MemberUpdate, ...]:
        """Our Alive when `target` has not had it from us yet (`grid.core.swim.gossip`)."""
        return self._introductions.lead(self._me(), target)

    def _on_suspicion_timeout(self, timer: SuspicionTimeout, now: float) -> list[Effect]:
        suspicions = self._view.suspicions
        suspicion = suspicions.get(timer.member)
        if suspicion is None or suspicion.incarnation != timer.incarnation:
            return []
        if now + TIMER_TOLERANCE_S < suspicion.deadline:
            return []  # a confirmation moved the deadline; that timer is pending too
        member = self._members.get(timer.member)
        if member is None or member.state is not MemberState.SUSPECT:
            del suspicions[timer.member]
            return []
        out: list[Effect] = []
        verdict = Dead(member.id, member.address, member.incarnation, self.node_id)
        self._view.apply(verdict, now, out, gossip=True)
        return out

    def _on_push_pull_tick(self, timer: PushPullTick, now: float) -> list[Effect]:
        out: list[Effect] = []
        partners = self._members.random_live(self._rng, 1, alive_only=False)
        if partners:
            out.append(PushPullRequest(partners[0].address, self.push_pull_message(join=False)))
        # Seeds we do not hold live are retried too: that reconnects a member
        # left alone, and halves of a partition that outlasted the tombstones.
        lost: list[str] = []
        if self._seeds:
            live = {m.address for m in self._members if m.live}
            lost = [seed for seed in self._seeds if seed not in live]
        if lost:
            seed = self._rng.choice(lost)
            out.append(PushPullRequest(seed, self.push_pull_message(join=not partners)))
        interval = self.config.push_pull_interval(self._members.live_count + 1)
        out.append(Schedule(timer, now + interval))
        return out

    def _on_oversize_tick(self, now: float) -> list[Effect]:
        """Exchange state with a few members not known to hold every owed oversize item."""
        partners = self._view.oversize.round(
            now, self._members, self._rng, self.config.gossip_nodes
        )
        message = self.push_pull_message(join=False) if partners else None
        return [PushPullRequest(m.address, message) for m in partners if message]

    # -- anti-entropy ------------------------------------------------------

    def push_pull_message(self, *, join: bool) -> PushPull:
        """Our full state: every member record, ourselves, and our items."""
        view = self._view
        me: MemberUpdate
        if self.status is NodeStatus.LEFT:
            me = Dead(self.node_id, self.address, view.incarnation, self.node_id)
        else:
            me = view.me()
        members = [member.update for member in self._members.records.values()]
        members.append(me)
        return PushPull(self.node_id, tuple(members), tuple(view.items.values()), join)

    def handle_push_pull(self, request: PushPull, now: float) -> tuple[PushPull, list[Effect]]:
        """Answer a peer's push-pull request: our state (the reply) and effects.

        Our reply is taken before merging, so it carries only what we knew, less
        what the request holds already (`grid.core.swim.anti_entropy`).
        """
        reply = reply_to(request, self.push_pull_message(join=False))
        if self.status is not NodeStatus.JOINED:
            return reply, []
        out: list[Effect] = []
        self._view.merge(request, now, out)
        self._arm_gossip(now, out)
        return reply, out

    def handle_push_pull_reply(self, address: str, reply: PushPull, now: float) -> list[Effect]:
        """Merge the reply from `address` to a `PushPullRequest` of ours.

        A configured seed's reply admits the members it lists (its table holds
        only admitted members); any other reply makes newcomers applicants.
        Members first heard of through a reply are owed an introduction.
        """
        if self.status is not NodeStatus.JOINED:
            return []
        out: list[Effect] = []
        learned = self._view.merge(reply, now, out, trusted=address in self._seeds)
        self._introductions.owe(learned)
        self._arm_gossip(now, out)
        return out

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        return self._seq
