"""The simulator itself: determinism from the seed, and what the fake network does."""

from __future__ import annotations

import random

from grid.core.swim.effects import EventKind
from grid.core.swim.members import MemberState
from grid.testing.clock import FakeClock
from grid.testing.network import FakeNetwork, NetworkConditions
from grid.testing.simulator import Simulator


def run_lossy(seed: int) -> tuple[list[object], object]:
    sim = Simulator(seed, conditions=NetworkConditions(loss=0.2, duplicate=0.1, reorder=0.2))
    nodes = [sim.add_node() for _ in range(8)]
    sim.bootstrap(nodes)
    sim.run_for(120.0)
    sim.kill(nodes[3])
    sim.run_for(120.0)
    return list(sim.observations), sim.network.stats


def test_same_seed_replays_exactly(sim_seed: int):
    first, second = run_lossy(sim_seed), run_lossy(sim_seed)
    assert first == second
    observations, _ = first
    assert observations, "the run should have produced membership events"
    assert run_lossy(sim_seed + 1) != first


def test_sealed_bytes_replay_the_run_of_plain_messages(sim_seed: int):
    # Sizes are the codec's own and decoding inverts encoding, so carrying
    # sealed GRID frames changes nothing but what crosses the fake network.
    def run(sealed: bool) -> Simulator:
        sim = Simulator(sim_seed, sealed=sealed, conditions=NetworkConditions(loss=0.1))
        nodes = [sim.add_node() for _ in range(12)]
        sim.join(nodes[0], ())
        for node in nodes[1:]:
            sim.run_for(0.1)
            sim.join(node, [nodes[0]])
        sim.run_for(30.0)
        sim.kill(nodes[5])
        sim.run_for(60.0)
        return sim

    plain, sealed = run(False), run(True)
    assert sealed.observations == plain.observations
    assert sealed.network.stats == plain.network.stats
    assert sealed.wire.datagrams_sent == plain.network.stats.sent
    assert sealed.wire.datagrams_trimmed == sum(sealed.wire.datagrams_dropped.values()) == 0
    assert plain.wire.datagrams_sent == 0


def test_clock_runs_events_in_time_then_scheduling_order():
    clock = FakeClock()
    seen: list[str] = []
    clock.call_at(2.0, seen.append, "late")
    clock.call_at(1.0, seen.append, "first")
    clock.call_at(1.0, seen.append, "second")
    assert clock.run_until(1.5) == 2
    assert seen == ["first", "second"] and clock.now == 1.5
    clock.run_for(10.0)
    assert seen[-1] == "late" and clock.now == 11.5


def test_network_loss_duplication_and_partitions(sim_seed: int):
    clock = FakeClock()
    net = FakeNetwork(clock, random.Random(sim_seed), NetworkConditions(loss=0.25, duplicate=0.5))
    got: list[tuple[str, object]] = []
    net.attach("b", lambda src, msg: got.append((src, msg)))
    net.attach("a", lambda src, msg: got.append((src, msg)))
    for i in range(400):
        net.send("a", "b", i)
    clock.run_for(1.0)
    stats = net.stats
    assert 60 < stats.lost < 140, (stats, sim_seed)
    assert stats.duplicated > 100, (stats, sim_seed)
    assert stats.delivered == len(got) == 400 - stats.lost + stats.duplicated
    net.partition(["a"], ["b"])
    assert not net.reachable("a", "b") and not net.stream("a", "b", lambda: None)
    net.send("a", "b", "blocked")
    clock.run_for(1.0)
    assert ("a", "blocked") not in got
    net.heal()
    assert net.reachable("a", "b")


def test_graceful_leave_is_seen_as_left_and_rejoin_as_alive(sim_seed: int):
    sim = Simulator(sim_seed)
    nodes = [sim.add_node() for _ in range(16)]
    sim.bootstrap(nodes)
    sim.run_for(20.0)
    leaver = nodes[5]
    others = [n for n in nodes if n is not leaver]
    sim.leave(leaver)
    left = sim.run_until(
        lambda: all(n.state_of(leaver.id) is MemberState.LEFT for n in others),
        timeout_s=60.0,
    )
    assert left is not None, sim
    assert sim.deaths() == [], f"a graceful leave must not look like a failure: {sim!r}"
    lefts = {o.observer for o in sim.observations if o.kind is EventKind.LEFT}
    assert lefts == {n.id for n in others}
    incarnation = leaver.machine.incarnation
    sim.join(leaver, [nodes[0]])
    assert leaver.machine.incarnation == incarnation + 1
    back = sim.run_until(sim.full_membership, timeout_s=60.0)
    assert back is not None, sim


def test_restarted_node_refutes_its_tombstone(sim_seed: int):
    sim = Simulator(sim_seed)
    nodes = [sim.add_node() for _ in range(10)]
    sim.bootstrap(nodes)
    sim.run_for(20.0)
    crashed = nodes[2]
    sim.kill(crashed)
    declared = sim.run_until(
        lambda: all(n.state_of(crashed.id) is MemberState.DEAD for n in nodes if n is not crashed),
        timeout_s=200.0,
    )
    assert declared is not None, sim
    sim.restart(crashed, [nodes[0]])  # a fresh process: incarnation 0 again
    back = sim.run_until(sim.full_membership, timeout_s=60.0)
    assert back is not None, sim
    assert crashed.machine.incarnation > 0
