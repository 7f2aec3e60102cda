"""Gossip ticks and direct introductions of the SWIM machine, fed by hand."""

from __future__ import annotations

import random

import pytest

from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import Effect, GossipTick, ProbeTick, Schedule, Send
from grid.core.swim.machine import SwimMachine
from grid.core.swim.members import Member, MemberState, MemberTable
from grid.core.swim.messages import (
    Ack,
    Alive,
    BroadcastItem,
    Dead,
    Gossip,
    Lane,
    Ping,
    PushPull,
    Suspect,
)

from .conftest import MachineFactory, peer_address


def sends(effects: list[Effect]) -> list[Send]:
    return [e for e in effects if isinstance(e, Send)]


def gossip_ticks(effects: list[Effect]) -> list[Schedule]:
    return [e for e in effects if isinstance(e, Schedule) and isinstance(e.timer, GossipTick)]


def drain(machine: SwimMachine, effects: list[Effect], now: float) -> float:
    """Run gossip ticks until the machine stops scheduling them; returns the time."""
    while ticks := gossip_ticks(effects):
        now = ticks[0].at
        effects = machine.handle_timer(ticks[0].timer, now)
    return now


def test_news_goes_to_gossip_nodes_random_members_every_gossip_interval(
    make_machine: MachineFactory,
):
    machine, joined = make_machine(peers=6)
    cfg = machine.config
    # Joining queued our own Alive, so the first tick is armed one interval later.
    tick = gossip_ticks(joined)[0]
    assert 0.0 < tick.at <= cfg.gossip_interval_s
    out = machine.handle_timer(tick.timer, tick.at)
    datagrams = sends(out)
    assert len(datagrams) == cfg.gossip_nodes
    assert len({d.address for d in datagrams}) == cfg.gossip_nodes
    for datagram in datagrams:
        assert isinstance(datagram.message, Gossip) and datagram.message.source == "me"
        assert Alive("me", machine.address, 0) in datagram.message.updates
    # Ticks keep their phase: the next one is exactly one interval later.
    assert gossip_ticks(out)[0].at == pytest.approx(tick.at + cfg.gossip_interval_s)


def test_a_quiet_machine_sets_no_gossip_timers(make_machine: MachineFactory):
    machine, joined = make_machine(peers=4)
    now = drain(machine, joined, 0.0)
    # A probe answered with nothing new queues nothing and arms no tick.
    out = machine.handle_packet(peer_address(1), Ping(9, "p1", "me"), now + 1.0)
    assert gossip_ticks(out) == []


def test_a_suspicion_spreads_by_gossip_before_any_probe(make_machine: MachineFactory):
    machine, joined = make_machine(peers=6)
    now = drain(machine, joined, 0.0)
    accusation = Suspect("p2", peer_address(2), 0, "p1")
    out = machine.handle_packet(peer_address(1), Ping(1, "p1", "me", updates=(accusation,)), now)
    tick = gossip_ticks(out)[0]
    assert now < tick.at <= now + machine.config.gossip_interval_s
    spread = sends(machine.handle_timer(tick.timer, tick.at))
    assert spread and all(accusation in s.message.updates for s in spread)


def test_gossip_interval_zero_disables_the_tick(make_machine: MachineFactory):
    _, joined = make_machine(peers=4, config=SwimConfig(gossip_interval_s=0))
    assert gossip_ticks(joined) == []


def test_a_stale_gossip_tick_after_a_rejoin_is_ignored(make_machine: MachineFactory):
    machine, joined = make_machine(peers=4)
    stale = gossip_ticks(joined)[0]
    machine.leave(1.0)
    rejoined = machine.join((), 2.0)
    assert machine.handle_timer(stale.timer, 2.1) == []
    fresh = gossip_ticks(rejoined)[0]
    assert sends(machine.handle_timer(fresh.timer, fresh.at))


def _member(index: int, state: MemberState, changed_at: float) -> Member:
    return Member(f"p{index}", peer_address(index), 0, state, "x", changed_at)


def test_gossip_targets_include_the_recently_dead_but_never_the_left():
    table = MemberTable()
    rng = random.Random(3)
    table.put(_member(1, MemberState.ALIVE, 0.0), rng)
    table.put(_member(2, MemberState.DEAD, 10.0), rng)
    table.put(_member(3, MemberState.LEFT, 10.0), rng)
    picked = {m.id for _ in range(50) for m in table.gossip_targets(rng, 3, 20.0, 30.0)}
    assert picked == {"p1", "p2"}
    later = {m.id for _ in range(50) for m in table.gossip_targets(rng, 3, 40.0, 30.0)}
    assert later == {"p1"}
    assert {m.id for m in table.gossip_targets(rng, 3, 20.0, 0.0)} == {"p1"}


def test_a_member_learned_by_push_pull_gets_a_direct_introduction(make_machine: MachineFactory):
    machine, joined = make_machine(peers=2, seeds=(peer_address(1),))
    now = drain(machine, joined, 0.0)
    newcomers = tuple(Alive(f"n{i}", f"10.0.1.{i}:7946", 0) for i in range(1, 8))
    reply = PushPull("p1", newcomers, ())
    out = machine.handle_push_pull_reply(peer_address(1), reply, now)  # a seed's reply
    introduced: dict[str, int] = {}
    mine = Alive("me", machine.address, 0)
    while ticks := gossip_ticks(out):
        out = machine.handle_timer(ticks[0].timer, ticks[0].at)
        for datagram in sends(out):
            count = datagram.message.updates.count(mine)
            introduced[datagram.address] = introduced.get(datagram.address, 0) + count
    for alive in newcomers:
        assert introduced.get(alive.address) == 1, alive


def test_the_first_probe_of_each_member_carries_our_alive(make_machine: MachineFactory):
    config = SwimConfig(gossip_interval_s=0, retransmit_mult=1)
    machine, joined = make_machine(peers=3, config=config)
    tick = next(e.timer for e in joined if isinstance(e, Schedule) and type(e.timer) is ProbeTick)
    mine = Alive("me", machine.address, 0)
    carried: list[tuple[str, bool]] = []
    for round_ in range(6):
        now = 5.0 * (round_ + 1)
        ping = sends(machine.handle_timer(tick, now))[0].message
        assert isinstance(ping, Ping) and ping.target is not None
        carried.append((ping.target, ping.updates.count(mine) == 1))
        machine.handle_packet(peer_address(1), Ack(ping.seq, ping.target), now + 0.1)
    # Each of the 3 peers once in the first cycle, then no more.
    assert sorted(target for target, _ in carried[:3]) == ["p1", "p2", "p3"]
    assert [with_alive for _, with_alive in carried] == [True] * 3 + [False] * 3
    # A refutation raises our incarnation: the next cycle introduces us again.
    dead = Dead("me", "", 0, "p1")
    machine.handle_packet(peer_address(1), Ping(1, "p1", "me", updates=(dead,)), 31.0)
    refuted = Alive("me", machine.address, machine.incarnation)
    ping = sends(machine.handle_timer(tick, 35.0))[0].message
    assert ping.updates.count(refuted) == 1


def test_publishing_with_now_arms_the_gossip_tick_at_once(make_machine: MachineFactory):
    machine, joined = make_machine(peers=4)
    now = drain(machine, joined, 0.0)
    item = BroadcastItem(Lane.STATE, "me", 1, b"state")
    out = machine.publish(item, now)
    tick = gossip_ticks(out)[0]
    assert now < tick.at <= now + machine.config.gossip_interval_s
    spread = sends(machine.handle_timer(tick.timer, tick.at))
    assert len(spread) == machine.config.gossip_nodes
    assert all(s.message.items == (item,) for s in spread)
    # Without `now` the item waits for the next input to arm the tick.
    assert machine.publish(BroadcastItem(Lane.CERT, "me", 1, b"cert")) == []


def test_gossip_ticks_keep_one_phase(make_machine: MachineFactory):
    machine, joined = make_machine(peers=6)
    interval = machine.config.gossip_interval_s
    first = gossip_ticks(joined)[0].at
    now = drain(machine, joined, 0.0)
    # News arriving at any moment waits only for the next tick of the same phase.
    for index, delay in ((2, 0.013), (3, 1.37), (4, 2.0)):
        arrival = now + delay
        update = Suspect(f"p{index}", peer_address(index), 0, "p1")
        out = machine.handle_packet(
            peer_address(1), Ping(1, "p1", "me", updates=(update,)), arrival
        )
        tick = gossip_ticks(out)[0].at
        assert arrival < tick <= arrival + interval
        periods = (tick - first) / interval
        assert periods == pytest.approx(round(periods))
        now = drain(machine, out, arrival)
