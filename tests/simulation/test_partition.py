"""A healed partition re-converges both membership and the replicated CRDT state.

Each simulated site owns a `GridState` replica (`Simulator.attach_replica`).
Local writes publish the lane items whose revision moved; every `Deliver` is
merged into the replica, and a `reasserted` outcome (a peer echoed our own lane)
re-publishes ours, all through `grid.core.crdt.sync` as in the socket runtime.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import GridStateSnapshot
from grid.testing.simulator import SimNode, Simulator


class Owners:
    """The owners of the machines: one CRDT replica per simulated site."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.replicas: dict[str, GridState] = {}

    def attach(self, node: SimNode) -> None:
        self.replicas[node.id] = self.sim.attach_replica(node)

    def write(
        self, node: SimNode, change: Callable[[GridStateSnapshot], GridStateSnapshot]
    ) -> None:
        replica = self.replicas[node.id]
        self.sim.publish_snapshot(node, change(replica.local))

    def converged(self, nodes: list[SimNode]) -> bool:
        views = []
        for node in nodes:
            replica = self.replicas[node.id]
            views.append([(o, replica.snapshot(o)) for o in replica.origins()])
        return all(view == views[0] for view in views[1:])


def provider(node: SimNode, queue_depth: float) -> ProviderRecord:
    return ProviderRecord(
        name=f"vllm-{node.id}",
        cluster=f"vllm-{node.id}",
        site=node.id,
        backend_kind="local",
        models=("llama-3.1-8b-instruct",),
        healthy=True,
        observed_at=1_700_000_000.0,
        signals=RecordSignals(queue_depth=queue_depth),
    )


@pytest.mark.parametrize("sealed", [False, True], ids=["messages", "sealed-bytes"])
def test_healed_partition_reconverges_membership_and_crdt_state(sim_seed: int, sealed: bool):
    sim = Simulator(sim_seed, sealed=sealed)
    owners = Owners(sim)
    nodes = [sim.add_node() for _ in range(12)]
    for node in nodes:
        owners.attach(node)
    seeds = [nodes[0], nodes[6]]
    sim.join(nodes[0], ())
    for node in nodes[1:]:
        sim.run_for(0.2)
        sim.join(node, seeds[:1] if node is nodes[6] else seeds)
    for index, node in enumerate(nodes):
        owners.write(node, lambda s, n=node: s.add_capability("models", f"model-{n.id}"))
        owners.write(node, lambda s, i=index: s.add_spend("tenant-a", i + 1))
    settled = sim.run_until(
        lambda: sim.full_membership() and owners.converged(nodes), timeout_s=120, check_every_s=1
    )
    assert settled is not None, f"did not settle before the partition: {sim!r}"

    side_a, side_b = nodes[:6], nodes[6:]
    sim.network.partition([n.address for n in side_a], [n.address for n in side_b])
    sim.run_for(30.0)
    for index, node in enumerate(nodes):  # both sides keep writing while split
        owners.write(node, lambda s, n=node, i=index: s.put_provider("p", provider(n, i / 20)))
        owners.write(node, lambda s: s.add_spend("tenant-a", 100))
        if index % 3 == 0:
            owners.write(node, lambda s, n=node: s.remove_capability("models", f"model-{n.id}"))
    sim.run_for(150.0)
    a_ids = {n.id for n in side_a}
    cross_deaths = {(o.observer in a_ids, o.member in a_ids) for o in sim.deaths()}
    assert cross_deaths == {(True, False), (False, True)}, f"sides did not split: {sim!r}"
    assert not owners.converged(nodes)

    sim.network.heal()
    healed_at = sim.now
    bound_s = 3 * sim.config.push_pull_interval_s + sim.config.suspicion_max_s
    done = sim.run_until(
        lambda: sim.full_membership() and owners.converged(nodes),
        timeout_s=bound_s,
        check_every_s=1.0,
    )
    assert done is not None, f"no re-convergence {bound_s}s after healing: {sim!r}"
    print(f"partition healed: membership and CRDT state converged in {done - healed_at:.1f}s")
    replica = owners.replicas[nodes[3].id]
    assert replica.spend("tenant-a").value == sum(range(1, 13)) + 100 * 12
    models = replica.capabilities("models")
    assert models == {f"model-{n.id}" for i, n in enumerate(nodes) if i % 3}
    assert {pid for _, pid, _ in replica.providers()} == {"p"}
    assert len(list(replica.providers())) == 12
    assert all(sum(r.counters.dropped.values()) == 0 for r in owners.replicas.values())
    if sealed:  # every datagram and exchange crossed as a GRID frame, none dropped
        wire = sim.wire
        assert wire.datagrams_sent > 0 and wire.push_pulls_started > 0
        assert sum(wire.datagrams_dropped.values()) == sum(wire.streams_dropped.values()) == 0
