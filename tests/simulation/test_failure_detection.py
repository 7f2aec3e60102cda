"""Failure detection: real deaths within the suspicion bound, no false deaths under loss."""

from __future__ import annotations

import math

import pytest

from grid.core.swim.effects import EventKind
from grid.core.swim.members import MemberState
from grid.testing.network import NetworkConditions
from grid.testing.simulator import Simulator


def detection_bounds(sim: Simulator, n: int) -> tuple[float, float, float]:
    """The three bounds asserted for a crashed member, computed from the config.

    - First suspicion: each survivor walks a random permutation of its n-1
      peers, one per probe interval I, so some survivor probes the victim
      within 2(n-1) intervals of the crash; that probe fails one interval
      later. Bound: (2(n-1) + 1)·I.
    - From first suspicion to every survivor holding it dead: the first
      accuser's timer runs at most the maximum suspicion timeout S_max
      (Lifeguard's start value, shrinking with confirmations); its Dead then
      spreads within the gossip allowance below. Bound: S_max + spread.
    - Spread of the Dead, from the first verdict to every survivor: gossip
      ticks send it to `gossip_nodes` members every gossip interval G, so the
      epidemic covers n members in O(log n) ticks. Bound: 2·⌈log2 n⌉·G (with
      the defaults, 2 s at n = 32, against 50 s for spread on probes only).
    """
    cfg = sim.config
    interval = cfg.probe_interval_s
    first_suspicion = (2 * (n - 1) + 1) * interval
    spread = 2 * math.ceil(math.log2(n)) * cfg.gossip_interval_s
    return first_suspicion, cfg.suspicion_max_s + spread, spread


@pytest.mark.parametrize("sealed", [False, True], ids=["messages", "sealed-bytes"])
def test_killed_node_is_marked_dead_by_every_survivor_within_the_bound(sim_seed: int, sealed: bool):
    sim = Simulator(sim_seed, sealed=sealed)
    nodes = [sim.add_node() for _ in range(32)]
    sim.bootstrap(nodes)
    sim.run_for(20.0)
    victim, survivors = nodes[7], [n for n in nodes if n is not nodes[7]]
    killed_at = sim.now
    sim.kill(victim)
    first_bound, confirm_bound, spread_bound = detection_bounds(sim, len(nodes))

    def everyone_knows() -> bool:
        return all(s.state_of(victim.id) is MemberState.DEAD for s in survivors)

    done = sim.run_until(everyone_knows, timeout_s=first_bound + confirm_bound, check_every_s=0.05)
    assert done is not None, f"survivors did not all mark {victim.id} dead: {sim!r}"
    suspicions = [
        o for o in sim.observations if o.member == victim.id and o.kind is EventKind.SUSPECT
    ]
    first_suspect = min(o.at for o in suspicions)
    assert first_suspect - killed_at <= first_bound, sim
    assert done - first_suspect <= confirm_bound, sim
    first_dead = min(o.at for o in sim.deaths(victim.id))
    assert done - first_dead <= spread_bound, sim
    deaths = {o.observer for o in sim.deaths(victim.id)}
    assert deaths == {s.id for s in survivors}, sim
    assert not [o for o in sim.deaths() if o.member != victim.id], sim
    print(
        f"crash detected: first suspicion {first_suspect - killed_at:.1f}s "
        f"(bound {first_bound:.0f}s), all dead {done - first_suspect:.1f}s later "
        f"(bound {confirm_bound:.0f}s), spread of the verdict {done - first_dead:.2f}s "
        f"(bound {spread_bound:.1f}s)"
    )


def test_no_false_deaths_at_ten_percent_loss_over_ten_minutes(sim_seed: int):
    lossy = NetworkConditions(
        loss=0.10, delay_min_s=0.001, delay_max_s=0.030, duplicate=0.02, reorder=0.05
    )
    sim = Simulator(sim_seed, conditions=lossy)
    nodes = [sim.add_node() for _ in range(32)]
    sim.bootstrap(nodes)
    sim.run_for(600.0)
    assert sim.deaths() == [], f"false deaths under 10% loss: {sim.deaths()[:5]} {sim!r}"
    assert sim.full_membership(suspect_ok=True), sim
    suspected = [o for o in sim.observations if o.kind is EventKind.SUSPECT]
    # The loss is real: probes did fail and members did refute suspicion.
    assert sim.network.stats.lost > 0
    print(f"10% loss, 32 nodes, 600s: {len(suspected)} suspicions, all refuted")


def test_members_falsely_buried_in_a_loss_storm_come_back(sim_seed: int):
    # Gossip ticks spread refutations fast enough that 32 members ride out even
    # 40% loss for ten minutes (70% for five) without a false death, so the storm is harsher.
    storm = NetworkConditions(loss=0.80, delay_max_s=0.030, duplicate=0.02, reorder=0.05)
    sim = Simulator(sim_seed, conditions=storm)
    nodes = [sim.add_node() for _ in range(32)]
    sim.bootstrap(nodes)
    sim.run_for(300.0)
    assert sim.deaths(), "80% loss should cause some false deaths"
    sim.network.conditions = NetworkConditions()
    calm_at = sim.now
    # A buried member hears its own Dead (gossip or push-pull) and refutes with a
    # higher incarnation, which overrides the tombstone everywhere.
    bound_s = 3 * sim.config.push_pull_interval_s + sim.config.suspicion_max_s
    healed = sim.run_until(sim.full_membership, timeout_s=bound_s)
    assert healed is not None, f"no full membership {bound_s}s after the storm: {sim!r}"
    print(f"after an 80% loss storm: full membership {healed - calm_at:.0f}s after calm")
