"""No store or API failure ends the operator: each failure at each write site, on each store.

One site's operator runs on real sockets over the parametrized store (the SQLite
file, or the Kubernetes store talking to the API emulator), wrapped in the fault
wrapper. From the start, every write of one write site (the overlay, the
praxis.yaml, the budget view, the GridNetwork and GridSite status) fails with one failure
(403, 404, 409, 410, 422, 429 with a Retry-After, 500, 503, a timeout, a reset).
The operator must stay up, count the failure by site and reason, name it on the
resource where the resource can still be written, and converge once the fault
is cleared.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grid.adapters.store.port import ResourceStore
from grid.adapters.store.sqlite import SqliteStore
from grid.core.resources import GridNetwork
from grid.core.retry import classify
from grid.demo.mesh import DemoMesh
from grid.operator.output import CONSUMER_APPLY_FAILED
from grid.operator.overlay_loop import BUDGETS_APPLY_FAILED
from grid.operator.runtime import Operator
from grid.testing.faulty_store import FAULTS, FaultyStore, WriteFault, fault_error
from grid.testing.poll import eventually

from .conftest import CountingStore, site_settings

KINDS = ("GridNetwork", "GridSite", "InferenceProvider", "Secret")
Status = Callable[[ResourceStore], Any]


def _configmap_with(key: str) -> Callable[[str, str, str, Mapping[str, Any]], bool]:
    def matches(verb: str, kind: str, _name: str, body: Mapping[str, Any]) -> bool:
        return kind == "ConfigMap" and verb in ("create", "replace") and key in body["data"]

    return matches


def _network_round(verb: str, kind: str, _name: str, body: Mapping[str, Any]) -> bool:
    """The render round's GridNetwork status write (not the start's gridId)."""
    return verb == "patch_status" and kind == "GridNetwork" and "conditions" in body


def _site_status(verb: str, kind: str, _name: str, _body: Mapping[str, Any]) -> bool:
    return verb == "patch_status" and kind == "GridSite"


async def _network(store: ResourceStore) -> dict[str, Any]:
    (obj,) = await store.list("GridNetwork")
    return dict(obj.get("status") or {})


async def _overlay_reason(store: ResourceStore) -> str | None:
    items = (await _network(store)).get("overlayStatus") or []
    return str(items[0].get("reason")) if items else None


async def _consumer_reason(store: ResourceStore) -> str | None:
    items = (await _network(store)).get("consumerConfigStatus") or []
    return str(items[0].get("reason")) if items else None


@dataclass(frozen=True)
class Site:
    """A write site: which writes it makes, and how its failure shows on the resource."""

    name: str
    matches: Callable[[str, str, str, Mapping[str, Any]], bool]
    shown: Callable[[ResourceStore], Any] | None
    """An awaitable check that the failure is named on the resource (None: counted only,
    as the failing write is the one that would name it)."""


async def _overlay_failed(store: ResourceStore) -> bool:
    return await _overlay_reason(store) == "OverlayApplyFailed"


async def _consumer_failed(store: ResourceStore) -> bool:
    return await _consumer_reason(store) == CONSUMER_APPLY_FAILED


async def _budgets_failed(store: ResourceStore) -> bool:
    conditions = (await _network(store)).get("conditions") or []
    reasons = {c["type"]: c["reason"] for c in conditions}
    return reasons.get("OverlaysDistributed") == BUDGETS_APPLY_FAILED


SITES = [
    Site("overlay", _configmap_with("grid-overlay.json"), _overlay_failed),
    Site("consumer_config", _configmap_with("praxis.yaml"), _consumer_failed),
    Site("budgets", _configmap_with("grid-budgets.json"), _budgets_failed),
    Site("network_status", _network_round, None),
    Site("site_status", _site_status, None),
]


async def _converged(store: ResourceStore) -> bool:
    network = GridNetwork.model_validate((await store.list("GridNetwork"))[0])
    status = network.status
    if status is None or not status.conditions:
        return False
    ready = {c.type: c.status for c in status.conditions}.get("Ready") == "True"
    consumers = [c.reason for c in status.consumer_config_status]
    overlays = [o.reason for o in status.overlay_status]
    site = (await store.get("GridSite", "east")).get("status") or {}
    return (
        ready
        and consumers == ["Rendered"]
        and all(not r for r in overlays)
        and site.get("phase") is not None
    )


async def _seeded(tmp_path: Path, store: CountingStore) -> DemoMesh:
    mesh = DemoMesh(tmp_path, ["east"])
    await mesh.prepare()
    source = await SqliteStore.open(mesh.plan.sites["east"].store)
    for kind in KINDS:
        for obj in await source.list(kind):
            obj["metadata"].pop("resourceVersion", None)
            obj.pop("status", None)
            await store.create(obj)
    await source.close()
    return mesh


def _failures(operator: Operator, site: str, reason: str) -> float:
    value = operator.registry.get_sample_value(
        "grid_operator_write_failures_total", {"site": site, "reason": reason}
    )
    return value or 0.0


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("site", SITES, ids=[s.name for s in SITES])
async def test_a_failing_write_site_is_reported_and_converges_once_cleared(
    tmp_path: Path, store: CountingStore, site: Site, fault: str
) -> None:
    mesh = await _seeded(tmp_path, store)
    faulty = FaultyStore(store)
    injected = WriteFault(fault, site.matches)
    faulty.write_faults.append(injected)
    settings = site_settings(
        mesh, "east", store="memory:", render_interval_s=0.3, site_probe_interval_s=0.3
    )
    operator = Operator(settings, faulty)
    reason = classify(fault_error(fault)).reason.value
    task = asyncio.create_task(operator.run())
    try:

        async def reported() -> bool:
            assert not task.done(), task
            if _failures(operator, site.name, reason) < 1:
                return False
            return site.shown is None or bool(await site.shown(store))

        await eventually(reported, f"{site.name} reports {reason}", timeout_s=30)
        assert injected.hits >= 1
        injected.active = False

        async def converged() -> bool:
            assert not task.done(), task
            return await _converged(store)

        await eventually(converged, "the operator converges once the fault clears", timeout_s=30)
    finally:
        operator.stop()
        await asyncio.wait_for(task, 30)


def _start_write(verb: str, kind: str, _name: str, body: Mapping[str, Any]) -> bool:
    """The start's GridNetwork status write: the gridId and phase, before any round."""
    return verb == "patch_status" and kind == "GridNetwork" and "gridId" in body


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_failing_start_write_is_tried_again_until_it_passes(
    tmp_path: Path, store: CountingStore, fault: str
) -> None:
    mesh = await _seeded(tmp_path, store)
    faulty = FaultyStore(store)
    injected = WriteFault(fault, _start_write)
    faulty.write_faults.append(injected)
    settings = site_settings(
        mesh, "east", store="memory:", render_interval_s=0.3, site_probe_interval_s=0.3
    )
    operator = Operator(settings, faulty)
    task = asyncio.create_task(operator.run())
    try:

        async def retried() -> bool:
            assert not task.done(), task
            failed = operator.registry.get_sample_value(
                "grid_operator_round_failures_total", {"loop": "start"}
            )
            return injected.hits >= 2 and (failed or 0.0) >= 2

        await eventually(retried, f"the start write met {fault} twice", timeout_s=30)
        injected.active = False

        async def converged() -> bool:
            assert not task.done(), task
            return await _converged(store)

        await eventually(converged, "the operator starts once the fault clears", timeout_s=30)
    finally:
        operator.stop()
        await asyncio.wait_for(task, 30)
