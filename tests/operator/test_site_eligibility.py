"""Remote candidates come only from Active sites (SPEC-DECISIONS §14 eligibility).

An operator holds live records of two peer sites. While a peer is Active its
providers are in the overlay; the round after it turns Unreachable they are
gone (long before ``staleCandidateTtlSeconds``, an hour here), and the round
after it is Active again they are back. The other peer is untouched throughout.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.crdt.replica import GridState
from grid.core.resources import API_VERSION
from grid.core.resources.phases import SitePhase
from grid.operator.runtime import Operator
from grid.operator.settings import OperatorSettings
from grid.operator.startup import select_network

from .conftest import CountingStore


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


def _publish(origin: str, replica: GridState) -> None:
    peer = GridState(origin)
    record = ProviderRecord(
        name=f"vllm-{origin}",
        cluster=f"vllm-{origin}",
        site=origin,
        backend_kind="local",
        models=("llama",),
        healthy=True,
        observed_at=time.time(),
        signals=RecordSignals(queue_depth=0.1, kv_cache_utilization=0.1),
        phase="Available",
    )
    for item in peer.update_local(peer.local.put_provider(record.name, record)):
        replica.apply(item)


async def _operator(tmp_path: Path, store: CountingStore) -> Operator:
    for doc in _docs():
        await store.create(doc)
    settings = OperatorSettings(site="s0", store="memory:", overlay_dir=tmp_path / "out")
    operator = Operator(settings, store)  # type: ignore[arg-type]
    operator.served.network = await select_network(store, None)  # type: ignore[arg-type]
    operator.replica.auth = None  # the peers below publish unsigned items
    for origin in ("s1", "s2"):
        _publish(origin, operator.replica)
    return operator


def _sites_in_overlay(tmp_path: Path) -> set[str]:
    envelope = json.loads((tmp_path / "out" / "grid-overlay.json").read_text())
    return {c["site"] for c in envelope["overlay"]["candidates"]}


@pytest.mark.parametrize(
    "phase", [SitePhase.UNREACHABLE, SitePhase.CONNECTING, SitePhase.DISCOVERED, SitePhase.LEFT]
)
async def test_a_site_that_is_not_active_leaves_the_overlay_and_returns_when_active(
    tmp_path: Path, store: CountingStore, phase: SitePhase
) -> None:
    operator = await _operator(tmp_path, store)
    operator.sites.phases = {"s0": SitePhase.ACTIVE, "s1": SitePhase.ACTIVE, "s2": SitePhase.ACTIVE}
    await operator.reconcile_overlays()
    assert _sites_in_overlay(tmp_path) == {"s1", "s2"}

    operator.sites.phases = {**operator.sites.phases, "s1": phase}
    await operator.reconcile_overlays()
    assert _sites_in_overlay(tmp_path) == {"s2"}

    operator.sites.phases = {**operator.sites.phases, "s1": SitePhase.ACTIVE}
    await operator.reconcile_overlays()
    assert _sites_in_overlay(tmp_path) == {"s1", "s2"}
