"""A render round that sees no change does nothing: no render, no write, no status.

An operator over a counting store holds records of two peer sites in its
replica. After a first round, rounds with nothing changed make no store write
at all and leave the overlay files untouched, counted as ``unchanged`` on
/metrics; a changed record, a time-based deadline passing, or a GridNetwork
spec edit makes the next round render again.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import GridStateSnapshot
from grid.core.resources import API_VERSION
from grid.core.resources.phases import SitePhase
from grid.operator.round_gate import RoundGate
from grid.operator.runtime import Operator
from grid.operator.settings import OperatorSettings
from grid.operator.startup import select_network

from .conftest import CountingStore

MODEL = "llama"


def _docs() -> list[dict[str, Any]]:
    network = {
        "apiVersion": API_VERSION,
        "kind": "GridNetwork",
        "metadata": {"name": "net"},
        "spec": {
            "gatewayRefs": [{"name": "edge", "namespace": "grid", "localSiteName": "s0"}],
            "staleCandidateTtlSeconds": 3600,
        },
    }
    sites = [
        {
            "apiVersion": API_VERSION,
            "kind": "GridSite",
            "metadata": {"name": f"s{i}"},
            "spec": {"gridNetworkRef": "net", "region": "r1", "zone": f"r1-z{i}"},
        }
        for i in range(3)
    ]
    return [network, *sites]


def _record(name: str, origin: str, queue: float, observed_at: float) -> ProviderRecord:
    return ProviderRecord(
        name=name,
        cluster=name,
        site=origin,
        backend_kind="local",
        models=(MODEL,),
        healthy=True,
        observed_at=observed_at,
        signals=RecordSignals(queue_depth=queue, kv_cache_utilization=0.1),
        phase="Available",
    )


class Peer:
    """One peer origin publishing records into the operator's replica."""

    def __init__(self, origin: str, replica: GridState) -> None:
        self.state = GridState(origin)
        self.replica = replica

    def put(self, record: ProviderRecord) -> None:
        snap = self.state.local.put_provider(record.name, record)
        for item in self.state.update_local(snap):
            self.replica.apply(item)


async def _operator(
    tmp_path: Path, store: CountingStore, network: dict[str, Any] | None = None
) -> tuple[Operator, dict[str, Peer]]:
    docs = _docs()
    if network is not None:
        docs[0] = network
    for doc in docs:
        await store.create(doc)
    settings = OperatorSettings(site="s0", store="memory:", overlay_dir=tmp_path / "out")
    operator = Operator(settings, store)  # type: ignore[arg-type]
    operator.served.network = await select_network(store, None)  # type: ignore[arg-type]
    operator.sites.phases = {f"s{i}": SitePhase.ACTIVE for i in range(3)}
    operator.replica.auth = None  # the peers below publish unsigned items
    peers = {o: Peer(o, operator.replica) for o in ("s1", "s2")}
    now = time.time()
    for i in range(6):
        origin = f"s{1 + i % 2}"
        peers[origin].put(_record(f"p{i}", origin, i / 10, now))
    return operator, peers


def _writes(store: CountingStore) -> int:
    return sum(store.calls.values())


def _mtimes(root: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in root.iterdir()}


def _rounds(operator: Operator, outcome: str) -> float:
    value = operator.registry.get_sample_value(
        "grid_operator_render_rounds_total", {"outcome": outcome}
    )
    return value or 0.0


async def test_a_round_with_no_change_writes_nothing(tmp_path: Path, store: CountingStore) -> None:
    operator, peers = await _operator(tmp_path, store)
    await operator.reconcile_overlays()
    await operator.reconcile_overlays()  # the first status write may settle one more thing
    assert _rounds(operator, "rendered") >= 1
    writes, files = _writes(store), _mtimes(tmp_path / "out")
    rendered = _rounds(operator, "rendered")
    renders = operator.overlays.renders.value("unchanged")
    for _ in range(5):
        await operator.reconcile_overlays()
    assert operator.overlays.renders.value("unchanged") == renders  # nothing was rendered
    assert _writes(store) == writes, store.calls
    assert _mtimes(tmp_path / "out") == files
    assert _rounds(operator, "unchanged") >= 5
    assert _rounds(operator, "rendered") == rendered

    peers["s1"].put(_record("p0", "s1", 0.7, time.time()))
    await operator.reconcile_overlays()
    assert _rounds(operator, "rendered") == rendered + 1
    assert _writes(store) > writes
    assert _mtimes(tmp_path / "out")["grid-overlay.json"] != files["grid-overlay.json"]


async def test_a_spec_edit_renders_and_a_status_echo_does_not(
    tmp_path: Path, store: CountingStore
) -> None:
    operator, _peers = await _operator(tmp_path, store)
    await operator.reconcile_overlays()
    (obj,) = await store.list("GridNetwork")
    operator.gate.store_event("GridNetwork", obj)
    await operator.reconcile_overlays()
    rendered = _rounds(operator, "rendered")
    status_only = {**obj, "status": {**(obj.get("status") or {}), "phase": "Elsewhere"}}
    status_only["metadata"] = {**obj["metadata"], "resourceVersion": "999"}
    operator.gate.store_event("GridNetwork", status_only)
    await operator.reconcile_overlays()
    assert _rounds(operator, "rendered") == rendered
    edited = {**obj, "spec": {**obj["spec"], "staleCandidateTtlSeconds": 1800}}
    operator.gate.store_event("GridNetwork", edited)
    await operator.reconcile_overlays()
    assert _rounds(operator, "rendered") == rendered + 1


def test_a_passed_deadline_renders_again() -> None:
    gate = RoundGate(CollectorRegistry())
    replica = GridState("s0")
    snap = GridStateSnapshot.empty("s0")
    replica.update_local(snap)
    key = gate.key(replica, {})
    assert not gate.unchanged(key, 0.0)
    gate.rendered(key, deadline=10.0)
    assert gate.unchanged(gate.key(replica, {}), 9.0)
    assert not gate.unchanged(gate.key(replica, {}), 10.0)
    gate.rendered(None, deadline=math.inf)
    assert not gate.unchanged(gate.key(replica, {}), 11.0)


async def test_the_live_view_explains_a_round_only_when_read(
    tmp_path: Path, store: CountingStore
) -> None:
    operator, _peers = await _operator(tmp_path, store)
    await operator.reconcile_overlays()
    assert operator.live._pending is not None  # kept, not explained yet
    explained = operator.live.explanations
    assert [e.model for e in explained] == [MODEL]
    assert operator.live._pending is None
    assert operator.live.explanations is explained  # read again: not explained again


async def test_a_default_tenant_edit_renders_praxis_yaml_again(
    tmp_path: Path, store: CountingStore
) -> None:
    (obj,) = [d for d in _docs() if d["kind"] == "GridNetwork"]
    endpoints = [
        {"cluster": f"p{i}", "address": f"127.0.0.1:{9000 + i}", "transport": {"mode": "plaintext"}}
        for i in range(6)
    ]
    obj["spec"]["gatewayRefs"][0]["consumerConfig"] = {
        "enabled": True,
        "clusterEndpoints": endpoints,
    }
    obj["spec"]["budgetPolicy"] = {
        "tenants": [{"tenantId": "acme", "capUsd": 1}, {"tenantId": "globex", "capUsd": 1}],
        "defaultTenant": "acme",
    }
    operator, _peers = await _operator(tmp_path, store, obj)
    praxis = tmp_path / "out" / "praxis.yaml"
    await operator.reconcile_overlays()
    assert 'default_tenant: "acme"' in praxis.read_text()
    overlay = (tmp_path / "out" / "grid-overlay.json").read_text()
    rendered = _rounds(operator, "rendered")

    (stored,) = await store.list("GridNetwork")
    policy = {**stored["spec"]["budgetPolicy"], "defaultTenant": "globex"}
    edited = {**stored, "spec": {**stored["spec"], "budgetPolicy": policy}}
    await store.replace(edited)
    operator.served.network = await select_network(store, None)  # type: ignore[arg-type]
    operator.gate.store_event("GridNetwork", edited)
    await operator.reconcile_overlays()
    assert _rounds(operator, "rendered") == rendered + 1
    assert 'default_tenant: "globex"' in praxis.read_text()
    # The overlay does not read defaultTenant: its content is the same.
    assert (tmp_path / "out" / "grid-overlay.json").read_text() == overlay
