"""The in-process mesh of the operator bench's reconcile figure: peer sites and their records.

``bench/operator.py`` times `Operator.reconcile_overlays` over an embedded store
holding `reconcile_docs` and a replica fed by `Peers`, which publishes 1,000
(or 10,000) provider records from peer origins and changes one per step.
"""

from __future__ import annotations

import time
from typing import Any

from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import GridStateSnapshot
from grid.core.resources import API_VERSION
from grid.demo.plan import MODEL

PEER_SITES = 9
"""Remote origins the 1,000 in-process providers are spread over."""


def reconcile_docs(sites: int) -> list[dict[str, Any]]:
    """The store's resources: a GridNetwork with one gateway at s0, and ``sites`` GridSites."""
    network = {
        "apiVersion": API_VERSION,
        "kind": "GridNetwork",
        "metadata": {"name": "bench"},
        "spec": {
            "gatewayRefs": [{"name": "edge", "namespace": "grid", "localSiteName": "s0"}],
            "staleCandidateTtlSeconds": 3600,
        },
    }
    grid_sites = [
        {
            "apiVersion": API_VERSION,
            "kind": "GridSite",
            "metadata": {"name": f"s{i}"},
            "spec": {"gridNetworkRef": "bench", "region": f"r{i % 3}", "zone": f"r{i % 3}-z{i}"},
        }
        for i in range(sites)
    ]
    return [network, *grid_sites]


def _record(i: int, origin: str, queue: float, now: float) -> ProviderRecord:
    """Provider ``i``'s record: one model, signals that spread the scores."""
    kind = ("local", "local", "local", "cloud_managed", "api_provider")[i % 5]
    return ProviderRecord(
        name=f"p{i}",
        cluster=f"p{i}",
        site=origin,
        backend_kind=kind,
        models=(MODEL,),
        healthy=i % 97 != 0,
        observed_at=now,
        signals=RecordSignals(
            queue_depth=queue,
            kv_cache_utilization=(i * 13 % 100) / 100,
            prefix_cache_hit_ratio=(i * 3 % 100) / 100,
            p99_latency_ms=float(200 + i * 37 % 4000),
            cost_per_million_input_tokens=(i % 40) * 0.5,
        ),
        phase="Available",
    )


class Peers:
    """Nine peer origins publishing 1,000 records into one operator's replica."""

    def __init__(self, providers: int, replica: GridState, peers: int = PEER_SITES) -> None:
        self.replica = replica
        self.count = providers
        self.peers = peers
        self.now = time.time()
        self.origins = {f"s{k}": GridState(f"s{k}") for k in range(1, peers + 1)}
        snaps = {o: GridStateSnapshot.empty(o) for o in self.origins}
        for i in range(providers):
            origin = f"s{1 + i % peers}"
            snaps[origin] = snaps[origin].put_provider(
                f"p{i}", _record(i, origin, (i * 7 % 85) / 100, self.now)
            )
        for origin, snap in snaps.items():
            self._publish(origin, snap)

    def _publish(self, origin: str, snap: GridStateSnapshot) -> None:
        for item in self.origins[origin].update_local(snap):
            self.replica.apply(item)

    def change(self, step: int) -> None:
        """One listed provider's queue depth moves, as one scrape would report.

        Providers the overlay cannot list (unhealthy, or KV cache at the
        Excluded threshold) are skipped, so every change rewrites the overlay.
        """
        i = step % self.count
        while i % 97 == 0 or i * 13 % 100 >= 90:
            i = (i + 1) % self.count
        origin = f"s{1 + i % self.peers}"
        snap = self.origins[origin].local
        record = _record(i, origin, ((step * 31) % 85) / 100, self.now)
        self._publish(origin, snap.put_provider(f"p{i}", record))
