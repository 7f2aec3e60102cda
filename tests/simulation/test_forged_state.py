"""One forged state item cannot remove a site from the grid (issue: forged revision 2^62).

The forger holds the SWIM key (in the simulator: it can put any datagram on
the network) but not west's site key. It sends the exact item of the report:
lane ``state``, origin ``west``, revision 2^62, 200 random payload bytes, to
every site. West's provider must stay listed everywhere, west's later writes
must keep arriving, and after west restarts with a fresh replica its
candidates must come back. Seeds come from `sim_seed` and are printed.
"""

from __future__ import annotations

import random

from grid.core.crdt.payload import encode_lane
from grid.core.crdt.record import ProviderRecord
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import GridStateSnapshot, Lane, StateLaneValue
from grid.core.swim.messages import BroadcastItem, Gossip
from grid.testing.origin import SitePki
from grid.testing.simulator import SimNode, Simulator

SITES = ("east", "west", "central")
FORGER = "10.99.99.1:7946"
FORGED_REVISION = 2**62


def _record(observed_at: float) -> ProviderRecord:
    return ProviderRecord(
        name="vllm-west", cluster="vllm-west", site="west", backend_kind="local",
        models=("m",), healthy=True, observed_at=observed_at,
    )  # fmt: skip


def _refresh(observed_at: float):  # type: ignore[no-untyped-def]
    def change(snap: GridStateSnapshot) -> GridStateSnapshot:
        return snap.put_provider("vllm-west", _record(observed_at))

    return change


def _listed(node: SimNode, observed_at: float | None = None) -> bool:
    """Whether ``node`` lists west's provider (with that sample time, when given)."""
    assert node.replica is not None
    found = [r for o, pid, r in node.replica.providers() if (o, pid) == ("west", "vllm-west")]
    return bool(found) and (observed_at is None or found[0].observed_at == observed_at)


def _mesh(seed: int, pki: SitePki | None) -> tuple[Simulator, dict[str, SimNode]]:
    sim = Simulator(seed)
    nodes = {site: sim.add_node(site) for site in SITES}
    for site, node in nodes.items():
        sim.attach_replica(node, pki.replica(site) if pki else GridState(site))
    sim.bootstrap(nodes.values())
    for site, node in nodes.items():
        if pki is not None:  # the cert lane, written by `SitePki.replica`, goes out first
            assert node.replica is not None
            sim.apply(node, node.machine.publish(node.replica.item(site, Lane.CERT), sim.now))
    return sim, nodes


def _forge(sim: Simulator, nodes: dict[str, SimNode], seed: int) -> BroadcastItem:
    payload = random.Random(seed).randbytes(200)
    forged = BroadcastItem(Lane.STATE, "west", FORGED_REVISION, payload)
    for node in nodes.values():
        sim.network.send(FORGER, node.address, Gossip("forger", items=(forged,)))
    return forged


def _run_forgery(seed: int, pki: SitePki | None) -> None:
    print(f"simulation seed {seed} ({'signed' if pki else 'unsigned'} items)")
    sim, nodes = _mesh(seed, pki)
    west, others = nodes["west"], [nodes["east"], nodes["central"]]
    sim.write_local(west, _refresh(1.0))
    assert sim.run_until(lambda: all(_listed(n) for n in others), timeout_s=30) is not None

    forged = _forge(sim, nodes, seed)
    sim.run_for(5.0)
    assert all(_listed(n) for n in others), "west's provider vanished after the forged item"
    for node in nodes.values():
        assert forged not in node.machine.known_items(), f"{node.id} holds the forged item"
    # West's own writes still get through everywhere: its lane was not silenced.
    sim.write_local(west, _refresh(2.0))
    assert sim.run_until(lambda: all(_listed(n, 2.0) for n in others), timeout_s=30) is not None

    # A restart with a fresh replica (a new process) brings west back as well.
    sim.kill(west)
    fresh = pki.replica("west", base_revision=10) if pki else GridState("west", base_revision=10)
    sim.restart(west, [nodes["east"]], replica=fresh)
    if pki is not None:
        sim.apply(west, west.machine.publish(fresh.item("west", Lane.CERT), sim.now))
    sim.write_local(west, _refresh(3.0))
    _forge(sim, nodes, seed + 1)
    assert sim.run_until(lambda: all(_listed(n, 3.0) for n in others), timeout_s=60) is not None
    dropped = {n.id: n.replica.counters.dropped for n in nodes.values() if n.replica}
    shown = {site: {r: c for r, c in counts.items() if c} for site, counts in dropped.items()}
    print(f"dropped items per site: {shown}")
    if pki is not None:
        # Every site saw the forged items and refused them for their signature.
        assert all(d["bad_signature"] + d["unsigned"] >= 1 for d in dropped.values()), dropped


def test_forged_state_item_with_origin_signatures(sim_seed: int) -> None:
    _run_forgery(sim_seed, SitePki.create(SITES, key_kind="ed25519", seed=sim_seed))


def test_the_signed_forgery_run_replays_from_its_seed(sim_seed: int) -> None:
    """Same seed, same run: seeded Ed25519 keys keep every item's size, so traffic repeats."""
    runs = []
    for _ in range(2):
        sim, nodes = _mesh(sim_seed, SitePki.create(SITES, key_kind="ed25519", seed=sim_seed))
        sim.write_local(nodes["west"], _refresh(1.0))
        _forge(sim, nodes, sim_seed)
        sim.run_for(20.0)
        runs.append((sim.network.stats, [len(n.delivered) for n in nodes.values()]))
    assert runs[0] == runs[1]


def test_forged_state_item_without_signatures_never_silences_the_origin(sim_seed: int) -> None:
    _run_forgery(sim_seed, None)


def test_a_decodable_forged_revision_is_reasserted_past_by_the_origin(sim_seed: int) -> None:
    """Unsigned replicas: a forged item that decodes is out-ranked by west's reassertion."""
    print(f"simulation seed {sim_seed}")
    sim, nodes = _mesh(sim_seed, None)
    west, east = nodes["west"], nodes["east"]
    sim.write_local(west, _refresh(1.0))
    assert sim.run_until(lambda: _listed(east), timeout_s=30) is not None
    forged = BroadcastItem(Lane.STATE, "west", FORGED_REVISION, encode_lane(StateLaneValue()))
    sim.network.send(FORGER, east.address, Gossip("forger", items=(forged,)))
    replica = west.replica
    assert replica is not None

    def reasserted() -> bool:
        return replica.local.revision(Lane.STATE) > FORGED_REVISION

    assert sim.run_until(reasserted, timeout_s=60) is not None
    sim.write_local(west, _refresh(2.0))
    assert sim.run_until(lambda: _listed(east, 2.0), timeout_s=30) is not None
