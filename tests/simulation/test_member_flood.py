"""A SWIM-key holder floods a site with announced members.

The attack as an outside probe ran it against `grid demo`: 79 sealed Gossip
datagrams, sent in 0.2 s, announced 3,000 fake members, all at the address of
a UDP sink. East's table took 2,999 of them, the fakes spread to the other
sites, west declared the real east dead within about 5 s, and east's probes
went mostly to the sink (2,324 datagrams in 60 s). Here the network carries
real sealed bytes, the machines run the spec's timing (5 s probe rounds), and
the sink is an address that never answers.
"""

from __future__ import annotations

from typing import Any

import pytest

from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import EventKind
from grid.core.swim.messages import Alive, Gossip
from grid.core.wire.sealed import seal_datagram
from grid.testing.simulator import SimNode, Simulator

SINK = "10.200.0.1:7946"
MALLORY = "10.200.0.2:7946"
SITES = ("east", "west", "central", "north", "south")


class Sink:
    """Counts every datagram that reaches its address; answers nothing."""

    def __init__(self) -> None:
        self.datagrams = 0

    def __call__(self, src: str, message: Any) -> None:
        self.datagrams += 1


def mesh(sim: Simulator) -> list[SimNode]:
    nodes = [sim.add_node(name) for name in SITES]
    sim.join(nodes[0], ())
    for node in nodes[1:]:
        sim.run_for(0.5)
        sim.join(node, [nodes[0]])
    reached = sim.run_until(sim.full_membership, timeout_s=30.0, check_every_s=0.5)
    assert reached is not None, sim
    return nodes


def flood(sim: Simulator, target: SimNode, fakes: list[Alive], spread_s: float = 0.2) -> int:
    """Send the fakes to `target` in Gossip datagrams of 38 each (sealed, when the
    network carries bytes), within `spread_s`."""
    chunks = [tuple(fakes[i : i + 38]) for i in range(0, len(fakes), 38)]
    for index, chunk in enumerate(chunks):
        packet: Gossip | bytes = Gossip("mallory", updates=chunk)
        if sim.keyring is not None:
            packet, trimmed = seal_datagram(packet, sim.keyring)
            assert not trimmed
        sim.clock.call_later(
            spread_s * index / len(chunks), sim.network.send, MALLORY, target.address, packet
        )
    return len(chunks)


def at_sink(count: int) -> list[Alive]:
    return [Alive(f"fake-{i:04d}", SINK, 0) for i in range(count)]


def test_3000_fakes_at_a_sink_are_never_admitted_and_draw_no_reflection(sim_seed: int):
    sim = Simulator(sim_seed, sealed=True)
    nodes = mesh(sim)
    east = nodes[0]
    sink = Sink()
    sim.network.attach(SINK, sink)
    observed = len(sim.observations)
    assert flood(sim, east, at_sink(3000)) == 79
    sim.run_for(60.0)
    tables = {node.id: len(node.machine.members()) for node in nodes}
    print(f"3,000 fakes at one sink: tables {tables}, sink got {sink.datagrams} in 60 s")
    assert all(size == len(SITES) - 1 for size in tables.values()), tables
    assert sink.datagrams <= sim.config.proof_attempts
    assert east.machine.admission.refused["address_taken"] == 2999
    assert sim.full_membership()
    troubles = [o for o in sim.observations[observed:] if o.kind is not EventKind.ALIVE]
    assert troubles == [], troubles  # nobody was even suspected, east least of all


def test_fakes_at_3000_addresses_are_capped_and_challenged_at_the_budgeted_rate(sim_seed: int):
    config = SwimConfig()
    sim = Simulator(sim_seed, sealed=True, config=config)
    nodes = mesh(sim)
    east = nodes[0]
    sinks = [Sink() for _ in range(3000)]
    fakes = []
    for i, sink in enumerate(sinks):
        address = f"10.{201 + i // 250}.{i % 250}.9:7946"
        sim.network.attach(address, sink)
        fakes.append(Alive(f"fake-{i:04d}", address, 0))
    flood(sim, east, fakes)
    sim.run_for(60.0)
    reflected = sum(sink.datagrams for sink in sinks)
    print(f"3,000 fakes at 3,000 addresses: east's table {len(east.machine.members())}, "
          f"{reflected} challenges in 60 s")  # fmt: skip
    assert len(east.machine.members()) == len(SITES) - 1
    # One flood fills the applicant pool once; each applicant is challenged at most
    # proof_attempts times, never faster than the token bucket allows.
    assert reflected <= config.unproven_max * config.proof_attempts
    assert reflected <= config.unproven_probe_burst + 60 * config.unproven_probe_rate_per_s
    assert east.machine.admission.refused["unproven_full"] == 3000 - config.unproven_max
    assert all(sink.datagrams <= config.proof_attempts for sink in sinks)
    assert sim.full_membership() and sim.deaths() == []


def test_a_flood_in_the_name_of_a_real_site_cannot_move_it(sim_seed: int):
    # East's own name at the sink, at a higher incarnation: a known member that
    # moves must answer at its new address, and east refutes the claim.
    sim = Simulator(sim_seed, sealed=True)
    nodes = mesh(sim)
    east, west = nodes[0], nodes[1]
    sink = Sink()
    sim.network.attach(SINK, sink)
    flood(sim, west, [Alive("east", SINK, 50)])
    sim.run_for(60.0)
    record = west.machine.member("east")
    assert record is not None and record.address == east.address
    assert sink.datagrams <= sim.config.proof_attempts
    assert sim.full_membership() and sim.deaths() == []


@pytest.mark.parametrize("sealed", [False, True], ids=["messages", "sealed-bytes"])
def test_sites_the_grid_ca_certified_are_admitted_without_a_challenge(sim_seed: int, sealed: bool):
    certified = set(SITES)
    sim = Simulator(sim_seed, sealed=sealed, vouch=lambda alive: alive.member in certified)
    nodes = mesh(sim)
    challenged = sum(n.machine.admission.challenges for n in nodes)
    vouched = sum(n.machine.admission.vouched for n in nodes)
    assert challenged == 0 and vouched > 0
    sink = Sink()
    sim.network.attach(SINK, sink)
    flood(sim, nodes[0], at_sink(3000))
    sim.run_for(30.0)
    assert all(len(n.machine.members()) == len(SITES) - 1 for n in nodes)
    assert sink.datagrams <= sim.config.proof_attempts
