"""The write sites only the Kubernetes API has: phase Events and the leader's Lease.

The API emulator fails every write to one resource with one failure (403, 404,
409, 410, 422, 429 with a Retry-After, 500, 503, a stall past the client's
timeout, a reset connection) until the rule is cleared.

* Events: the operator stays up, counts each Event it could not write in
  ``grid_operator_write_failures_total{site="event"}``, its status writes land
  meanwhile, and once the fault clears it converges and Events are recorded.
* The Lease: a leader whose renewals fail for less than the renew deadline
  keeps leading (each failure is reported), and renews once the fault clears.
  Losing the Lease for longer is a deliberate exit (test_leader.py).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.adapters.kube.client import ClientSettings, KubeClient, load_configuration
from grid.adapters.kube.lease import LeaseElector, LeaseSettings
from grid.operator.runtime import Operator
from grid.testing.faulty_store import FAULTS
from grid.testing.kube_api import KubeApiEmulator, connect_store
from grid.testing.poll import eventually

from .conftest import OPERATOR_NAMESPACE, CountingStore, site_settings
from .test_write_faults import _converged, _seeded


@pytest.fixture
async def emulator(kube_audit: Counter[Any]) -> AsyncIterator[KubeApiEmulator]:
    emu = KubeApiEmulator(bookmark_interval_s=0.2)
    await emu.start()
    yield emu
    await emu.stop()
    kube_audit.update(emu.audit)


@pytest.fixture
async def kube_store(emulator: KubeApiEmulator, tmp_path: Path) -> AsyncIterator[CountingStore]:
    where = tmp_path / "kube"
    where.mkdir()
    inner = await connect_store(
        emulator,
        where,
        event_namespace=OPERATOR_NAMESPACE,
        event_min_interval_s=0.0,  # every phase change is an Event
        request_timeout_s=0.5,  # a stalled write gives up soon
    )
    harness = await connect_store(emulator, where, agent="grid-test-harness")
    store = CountingStore(inner, harness)
    yield store
    await store.close()


def _event_failures(operator: Operator) -> float:
    total = 0.0
    for metric in operator.registry.collect():
        for sample in metric.samples:
            if sample.name == "grid_operator_write_failures_total":
                total += sample.value if sample.labels["site"] == "event" else 0.0
    return total


@pytest.mark.parametrize("fault", FAULTS)
async def test_failing_events_are_counted_and_the_operator_converges(
    tmp_path: Path, emulator: KubeApiEmulator, kube_store: CountingStore, fault: str
) -> None:
    mesh = await _seeded(tmp_path, kube_store)
    rule = emulator.fail_writes("events", fault)
    settings = site_settings(
        mesh, "east", store="memory:", render_interval_s=0.3, site_probe_interval_s=0.3
    )
    operator = Operator(settings, kube_store.inner)  # the KubernetesStore itself, as in production
    task = asyncio.create_task(operator.run())
    try:

        async def counted() -> bool:
            assert not task.done(), task
            return _event_failures(operator) >= 1

        await eventually(counted, f"an Event failing with {fault} is counted", timeout_s=30)  # type: ignore[arg-type]
        assert rule.hits >= 1 and emulator.objects_of("Event") == []

        async def converged() -> bool:
            assert not task.done(), task
            return bool(await _converged(kube_store))

        # Status writes are not held back by the Events failing beside them.
        await eventually(converged, "the operator converges while Events fail", timeout_s=30)  # type: ignore[arg-type]
        rule.clear()
        await kube_store.patch_status("GridSite", "east", {"phase": "Degraded"})
        await eventually(
            lambda: bool(emulator.objects_of("Event")), "an Event once cleared", timeout_s=10
        )
        assert not task.done()
    finally:
        operator.stop()
        await asyncio.wait_for(task, 30)


@pytest.mark.parametrize("fault", FAULTS)
async def test_the_leader_keeps_its_lease_through_failed_renewals(
    emulator: KubeApiEmulator, tmp_path: Path, fault: str
) -> None:
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(emulator.kubeconfig()))
    client = KubeClient(
        await load_configuration(path),
        ClientSettings(backoff_base_s=0.01, backoff_cap_s=0.05, request_timeout_s=0.3, retries=1),
    )
    settings = LeaseSettings(lease_duration_s=6.0, renew_deadline_s=4.0, retry_period_s=0.1)
    elector = LeaseElector(client, "grid-operator-east", "grid", "replica-a", settings)
    failed: list[BaseException] = []
    elector.renewal_failed = failed.append
    holding: asyncio.Task[None] | None = None
    try:
        assert await elector.try_acquire_or_renew()
        rule = emulator.fail_writes("leases", fault)
        holding = asyncio.create_task(elector.hold())
        # A 409 is a lost race, not a failure: it is not reported, only tried again.
        await eventually(
            lambda: rule.hits >= 2 and (fault == "409" or bool(failed)),
            f"renewals met {fault} and were reported",
            timeout_s=10,
        )
        assert not holding.done(), holding
        rule.clear()
        before = len(emulator.writes)

        def renewed() -> bool:
            assert holding is not None and not holding.done(), holding
            return any(w[2] == "leases" for w in emulator.writes[before:])

        await eventually(renewed, "a renewal once the fault clears", timeout_s=10)
        assert elector.is_leader
        assert emulator.lease_holders() == {"grid/grid-operator-east": "replica-a"}
    finally:
        if holding is not None:
            holding.cancel()
            await asyncio.gather(holding, return_exceptions=True)
        await client.close()
