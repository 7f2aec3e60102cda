"""Membership converges: joins reach everyone, one update reaches 1,024 nodes in O(log n)."""

from __future__ import annotations

import math

import pytest

from grid.core.swim.config import SwimConfig
from grid.core.swim.dissemination import DATAGRAM_HEADROOM_BYTES, PART_OVERHEAD_BYTES
from grid.core.swim.messages import Alive, BroadcastItem, Lane
from grid.core.wire.codec import encoded_size
from grid.testing.simulator import Simulator

JOIN_SPACING_S = 0.1


def test_64_nodes_reach_full_membership(sim_seed: int):
    sim = Simulator(sim_seed)
    nodes = [sim.add_node() for _ in range(64)]
    sim.join(nodes[0], ())
    for node in nodes[1:]:
        sim.run_for(JOIN_SPACING_S)
        sim.join(node, [nodes[0]])
    last_join = sim.now
    # Joiners get the seed's table by push-pull and introduce themselves to
    # its members; the seed's gossip of each joiner needs O(log n) gossip ticks.
    bound_s = gossip_bound_s(sim.config, len(nodes))
    reached = sim.run_until(sim.full_membership, timeout_s=bound_s, check_every_s=0.5)
    assert reached is not None, f"no full membership within {bound_s}s: {sim!r}"
    assert sim.deaths() == [], sim
    print(f"64 nodes: full membership {reached - last_join:.1f}s after the last join")


def gossip_bound_s(config: SwimConfig, n: int, c: int = 4) -> float:
    """c·⌈log2 n⌉ gossip intervals: the dissemination bound the 1,024-node tests assert.

    Gossip ticks send news to `gossip_nodes` members every gossip interval, so
    an update reaches n members in O(log n) ticks (8 s at n = 1,024 with the
    defaults, 1.6 probe intervals; on probe traffic alone it took up to
    2·⌈log2 n⌉ probe intervals, 100 s).
    """
    return c * math.ceil(math.log2(n)) * config.gossip_interval_s


def test_1024_nodes_disseminate_one_update_in_log_n_rounds(sim_seed: int):
    sim = Simulator(sim_seed)
    nodes = [sim.add_node() for _ in range(1024)]
    sim.bootstrap(nodes)
    sim.run_for(2 * sim.config.probe_interval_s)  # let the bootstrap gossip settle
    origin = nodes[0]
    item = BroadcastItem(Lane.STATE, origin.id, 1, b"provider state v1")
    sim.apply(origin, origin.machine.publish(item, sim.now))
    start = sim.now
    bound_s = gossip_bound_s(sim.config, len(nodes))
    reached = sim.run_until(
        lambda: all(node.delivered for node in nodes[1:]),
        timeout_s=bound_s,
        check_every_s=sim.config.gossip_interval_s,
    )
    assert reached is not None, f"not every node got the item in {bound_s:.0f}s: {sim!r}"
    print(f"1024 nodes: one update reached all in {reached - start:.1f}s (bound {bound_s:.0f}s)")


def test_1024_nodes_reach_full_membership_after_joins(sim_seed: int):
    sim = Simulator(sim_seed)
    nodes = [sim.add_node() for _ in range(1024)]
    settled, joiners = nodes[:1016], nodes[1016:]
    sim.bootstrap(settled)
    sim.run_for(2 * sim.config.probe_interval_s)
    for joiner in joiners:
        sim.join(joiner, [sim.rng.choice(settled)])
        sim.run_for(JOIN_SPACING_S)
    last_join = sim.now
    bound_s = gossip_bound_s(sim.config, len(nodes))
    reached = sim.run_until(
        sim.full_membership, timeout_s=bound_s, check_every_s=sim.config.gossip_interval_s
    )
    assert reached is not None, f"no full membership within {bound_s:.0f}s: {sim!r}"
    print(f"1024 nodes: 8 joins known to all in {reached - last_join:.1f}s (bound {bound_s:.0f}s)")
    assert sim.deaths() == [], sim


def test_256_simultaneous_joins_reach_full_membership_within_the_bandwidth_bound(sim_seed: int):
    sim = Simulator(sim_seed)
    nodes = [sim.add_node() for _ in range(256)]
    sim.join(nodes[0], ())
    for node in nodes[1:]:
        sim.run_for(0.02)
        sim.join(node, [nodes[0]])
    last_join = sim.now
    # Mass joins are limited by piggyback bandwidth, not by rounds: every one
    # of the n-1 joins is sent L = λ·⌈log10(n+1)⌉ times by each of n members,
    # and a member sends about two datagrams per round holding `slots` parts.
    # Draining every queue once on probe traffic alone bounds the time to full
    # membership; gossip ticks add bandwidth, so they only come in earlier.
    # Admission adds less: each member challenges each joiner once, 128 at
    # once and 20 a second after that, (255 - 128)/20 s ≈ 1.3 rounds at most.
    n = len(nodes)
    alive = Alive(nodes[-1].id, nodes[-1].address, 0)
    slots = (sim.config.datagram_budget_bytes - DATAGRAM_HEADROOM_BYTES) // (
        encoded_size(alive) + PART_OVERHEAD_BYTES
    )
    bound = math.ceil((n - 1) * sim.config.retransmit_limit(n) / (2 * slots))
    interval = sim.config.probe_interval_s
    reached = sim.run_until(sim.full_membership, timeout_s=bound * interval, check_every_s=1.0)
    assert reached is not None, f"256 joins not known everywhere in {bound} rounds: {sim!r}"
    rounds = (reached - last_join) / interval
    print(f"256 simultaneous joins: full membership in {rounds:.1f} rounds (bound {bound})")


JOIN_GAP_SEEDS = (1, 13, 22, 20, 25, 40, 55, 80, 84, 97, 110, 231)
"""Seeds at which, before direct introductions, a join at n = 8 left one member
unaware of another until the next periodic push-pull (15-45 s later)."""


def _eight_joins_through_one_seed(seed: int, config: SwimConfig) -> Simulator:
    sim = Simulator(seed, config=config)
    nodes = [sim.add_node() for _ in range(8)]
    sim.join(nodes[0], ())
    for node in nodes[1:]:
        sim.run_for(0.02)
        sim.join(node, [nodes[0]])
    return sim


@pytest.mark.parametrize("seed", JOIN_GAP_SEEDS)
def test_joins_at_eight_nodes_leave_no_member_unaware(seed: int):
    # memberlist's LAN timing: probe 1 s, gossip every 200 ms, push-pull 30 s.
    config = SwimConfig(
        probe_interval_s=1.0, probe_timeout_s=0.5, suspicion_timeout_s=4.0, push_pull_interval_s=30
    )
    sim = _eight_joins_through_one_seed(seed, config)
    # Gossip ticks carry each join within a few ticks; a member gossip missed
    # gets a direct introduction (up to gossip_nodes per tick) from the joiner.
    bound_s = 10 * config.gossip_interval_s
    reached = sim.run_until(sim.full_membership, timeout_s=bound_s, check_every_s=0.05)
    assert reached is not None, f"a join gap: no full membership {bound_s}s after joins: {sim!r}"


@pytest.mark.parametrize("seed", JOIN_GAP_SEEDS)
def test_joins_without_gossip_ticks_are_known_within_one_probe_cycle(seed: int):
    config = SwimConfig(
        probe_interval_s=1.0,
        probe_timeout_s=0.5,
        suspicion_timeout_s=4.0,
        push_pull_interval_s=30,
        gossip_interval_s=0,
    )
    sim = _eight_joins_through_one_seed(seed, config)
    # Every member's first probe of each other member carries its Alive, and
    # probes walk all 7 peers within two permutations: 2(n-1)+1 intervals, well
    # before the first periodic push-pull.
    bound_s = (2 * 7 + 1) * config.probe_interval_s
    reached = sim.run_until(sim.full_membership, timeout_s=bound_s, check_every_s=0.1)
    assert reached is not None, f"no full membership {bound_s}s after joins: {sim!r}"
