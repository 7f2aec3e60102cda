"""How a site's spend slot travels: by gossip after a restart, and by prompt
push-pull rounds when its state lane outgrew a datagram.

The spend G-Counter rides in the state lane with the site's provider records. A
lane larger than a datagram's room (`SwimConfig.datagram_budget_bytes` less the
headroom) is never piggybacked (`grid.core.swim.dissemination`). Left to the
periodic push-pull (every 30 s), its changes arrived up to 30 s late: the lag
the fault campaign saw once its faults had added a provider each. Such a lane
now owes push-pull rounds of its own (`grid.core.swim.oversize`).
"""

from __future__ import annotations

from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.crdt.replica import GridState
from grid.core.crdt.sync import Change
from grid.core.metering.budgets import raise_own_slots
from grid.core.vocabulary import BackendKind
from grid.testing.simulator import SimNode, Simulator

TENANT = "globex"


def _mesh(sim: Simulator, base_revision: int = 0) -> tuple[list[SimNode], list[GridState]]:
    nodes = [sim.add_node() for _ in range(3)]
    replicas = [sim.attach_replica(n, GridState(n.id, base_revision)) for n in nodes]
    sim.join(nodes[0], ())
    for node in nodes[1:]:
        sim.run_for(0.2)
        sim.join(node, [nodes[0]])
    return nodes, replicas


def _spread_s(sim: Simulator, replicas: list[GridState], cents: int) -> float | None:
    started = sim.now
    took = sim.run_until(
        lambda: all(r.spend(TENANT).value == cents for r in replicas),
        timeout_s=60.0,
        check_every_s=0.1,
    )
    return None if took is None else took - started


def test_spend_of_a_site_restarted_with_its_clock_behind_spreads_by_gossip(
    sim_seed: int,
) -> None:
    sim = Simulator(sim_seed)
    base = 1_000_000
    nodes, replicas = _mesh(sim, base)
    late = nodes[2]
    for _ in range(5):
        sim.write_local(late, lambda s: s.add_spend(TENANT, 1))
        sim.run_for(1.0)
    assert all(r.spend(TENANT).value == 5 for r in replicas)
    sim.kill(late)
    # The new process starts its revisions from a clock 30 s behind the old one's;
    # the join's push-pull echoes its old lane back and it re-asserts past it.
    fresh = GridState(late.id, base - 30_000)
    sim.restart(late, [nodes[0]], replica=fresh)
    sim.run_for(1.0)
    sim.write_local(late, lambda s: raise_own_slots(s, {TENANT: 7}))
    took = _spread_s(sim, [*replicas[:2], fresh], 7)
    assert took is not None and took < 3.0, took


def _record(site: str, i: int) -> ProviderRecord:
    return ProviderRecord(
        name=f"mock-{site}-{i}",
        cluster=f"mock-{site}-{i}",
        site=site,
        backend_kind=BackendKind.LOCAL,
        models=("llama-3.1-8b-instruct",),
        healthy=True,
        observed_at=1_765_000_000.0,
        signals=RecordSignals(queue_depth=1.0, cost_per_million_input_tokens=0.5),
        cost_per_million_input_tokens=0.5,
        cost_per_million_output_tokens=1.5,
    )


def _put(provider_id: str, record: ProviderRecord) -> Change:
    return lambda snap: snap.put_provider(provider_id, record)


def test_spend_spreads_by_gossip_when_the_state_lane_outgrew_a_datagram(
    sim_seed: int,
) -> None:
    sim = Simulator(sim_seed)
    nodes, replicas = _mesh(sim)
    spender = nodes[2]
    for i in range(10):
        sim.write_local(spender, _put(f"p{i}", _record(spender.id, i)))
    sim.run_for(65.0)  # two push-pulls: every peer holds the big lane
    assert all(len(list(r.providers())) == 10 for r in replicas)
    sim.write_local(spender, lambda s: raise_own_slots(s, {TENANT: 7}))
    took = _spread_s(sim, replicas, 7)
    assert took is not None and took < 3.0, took
