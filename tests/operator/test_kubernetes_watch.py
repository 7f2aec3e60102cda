"""An in-process operator on the Kubernetes store loses no overlay-changing event to a
watch that drops mid-stream or resumes into a 410."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

from grid.adapters.store.port import STORED_KINDS
from grid.adapters.store.sqlite import SqliteStore
from grid.demo.mesh import DemoMesh
from grid.demo.plan import NAMESPACE, NETWORK
from grid.errors import Conflict
from grid.operator.output import configmap_name
from grid.operator.runtime import Operator
from grid.operator.settings import OperatorSettings
from grid.testing.kube_api import KubeApiEmulator, connect_store
from grid.testing.poll import eventually


async def _copy_demo_store(mesh: DemoMesh, harness: Any) -> None:
    source = await SqliteStore.open(mesh.plan.sites["east"].store)
    try:
        for kind in STORED_KINDS:
            for obj in await source.list(kind):
                meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace")}
                meta["labels"] = obj["metadata"].get("labels") or {}
                await harness.create({**obj, "metadata": meta})
    finally:
        await source.close()


async def test_dropped_and_expired_watches_still_deliver_overlay_changes(
    tmp_path: Path, kube_audit: Counter[Any]
) -> None:
    mesh = DemoMesh(tmp_path, ["east"])
    await mesh.prepare()
    emulator = KubeApiEmulator(bookmark_interval_s=0.2)
    await emulator.start()
    harness = await connect_store(emulator, tmp_path, agent="grid-test-harness")
    store = await connect_store(emulator, tmp_path, event_namespace="grid")
    await _copy_demo_store(mesh, harness)
    settings = OperatorSettings(
        site="east", store="kubernetes", swim_bind="127.0.0.1:0", metrics_bind="127.0.0.1:0"
    )
    operator = Operator(settings, store)
    task = asyncio.create_task(operator.run())

    async def overlay_for(gateway: str) -> bool:
        assert not task.done(), task
        names = {o["metadata"]["name"] for o in emulator.objects_of("ConfigMap")}
        return configmap_name(NETWORK, gateway) in names

    async def add_gateway(name: str) -> None:
        for _attempt in range(20):  # the operator patches the status meanwhile
            network = await harness.get("GridNetwork", NETWORK)
            refs = network["spec"]["gatewayRefs"]
            refs.append({"name": name, "namespace": NAMESPACE, "localSiteName": "east"})
            try:
                await harness.replace(network)
                return
            except Conflict:
                continue
        raise AssertionError("the GridNetwork kept changing")

    try:
        first = mesh.plan.sites["east"].gateway
        await eventually(lambda: overlay_for(first), "the first overlay", timeout_s=20)
        watches = emulator.audit["watch", "grid.praxis-proxy.io", "gridnetworks", ""]
        emulator.drop_watches()  # mid-stream: the watch resumes from its last version
        await add_gateway("second")
        await eventually(
            lambda: overlay_for("second"), "the overlay of a gateway added while the watch was down"
        )
        relists = emulator.audit["list", "grid.praxis-proxy.io", "gridnetworks", ""]
        emulator.pause_watches()  # the API server restarts: watches get 503 meanwhile
        await add_gateway("third")
        emulator.compact()  # and its history is gone: the resume gets 410, a list follows
        emulator.resume_watches()
        await eventually(
            lambda: overlay_for("third"), "the overlay of a gateway added across a 410"
        )
        assert emulator.audit["watch", "grid.praxis-proxy.io", "gridnetworks", ""] >= watches + 2
        assert emulator.audit["list", "grid.praxis-proxy.io", "gridnetworks", ""] > relists
    finally:
        operator.stop()
        await asyncio.wait_for(task, 15)
        await store.close()
        await harness.close()
        await emulator.stop()
        kube_audit.update(emulator.audit)
