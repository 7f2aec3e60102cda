"""Membership converges: joins reach everyone, one update reaches 1,024 nodes in O(log n)."""

from __future__ import annotations

import math

from grid.core.swim.dissemination import (
    DATAGRAM_HEADROOM_BYTES,
    PART_OVERHEAD_BYTES,
    estimate_size,
)
from grid.core.swim.messages import Alive, BroadcastItem, Lane
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
    # Bound: 12 probe intervals after the last join (joiners get the seed's
    # table by push-pull; the seed's gossip of each joiner needs ~log n rounds).
    bound_s = 12 * sim.config.probe_interval_s
    reached = sim.run_until(sim.full_membership, timeout_s=bound_s, check_every_s=0.5)
    assert reached is not None, f"no full membership within {bound_s}s: {sim!r}"
    assert sim.deaths() == [], sim
    print(f"64 nodes: full membership {reached - last_join:.1f}s after the last join")


def rounds_bound(n: int, c: int = 2) -> int:
    """c·⌈log2 n⌉ probe rounds: the dissemination bound the 1,024-node tests assert."""
    return c * math.ceil(math.log2(n))


def test_1024_nodes_disseminate_one_update_in_log_n_rounds(sim_seed: int):
    sim = Simulator(sim_seed)
    nodes = [sim.add_node() for _ in range(1024)]
    sim.bootstrap(nodes)
    sim.run_for(2 * sim.config.probe_interval_s)  # let the bootstrap gossip settle
    origin = nodes[0]
    origin.machine.publish(BroadcastItem(Lane.STATE, origin.id, 1, b"provider state v1"))
    start = sim.now
    interval = sim.config.probe_interval_s
    bound = rounds_bound(len(nodes))
    reached = sim.run_until(
        lambda: all(node.delivered for node in nodes[1:]),
        timeout_s=bound * interval,
        check_every_s=interval / 5,
    )
    assert reached is not None, f"not every node got the item in {bound} rounds: {sim!r}"
    rounds = (reached - start) / interval
    print(f"1024 nodes: one update reached all in {rounds:.1f} rounds (bound {bound})")
    assert rounds <= bound, sim


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
    interval = sim.config.probe_interval_s
    bound = rounds_bound(len(nodes))
    reached = sim.run_until(sim.full_membership, timeout_s=bound * interval, check_every_s=1.0)
    assert reached is not None, f"no full membership within {bound} rounds: {sim!r}"
    rounds = (reached - last_join) / interval
    print(f"1024 nodes: 8 joins known to all in {rounds:.1f} rounds (bound {bound})")
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
    # Draining every queue once bounds the time to full membership.
    n = len(nodes)
    alive = Alive(nodes[-1].id, nodes[-1].address, 0)
    slots = (sim.config.datagram_budget_bytes - DATAGRAM_HEADROOM_BYTES) // (
        estimate_size(alive) + PART_OVERHEAD_BYTES
    )
    bound = math.ceil((n - 1) * sim.config.retransmit_limit(n) / (2 * slots))
    interval = sim.config.probe_interval_s
    reached = sim.run_until(sim.full_membership, timeout_s=bound * interval, check_every_s=1.0)
    assert reached is not None, f"256 joins not known everywhere in {bound} rounds: {sim!r}"
    rounds = (reached - last_join) / interval
    print(f"256 simultaneous joins: full membership in {rounds:.1f} rounds (bound {bound})")
