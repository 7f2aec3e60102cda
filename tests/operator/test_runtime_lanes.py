"""An in-process operator publishes its site lanes: geography, egress, gridId and public cert."""

from __future__ import annotations

import asyncio
from pathlib import Path

from grid.adapters.store.sqlite import SqliteStore
from grid.core.routing.mesh_view import GRID_ID_LABEL
from grid.core.trust import contains_private_key, fingerprint_pem
from grid.demo.mesh import DemoMesh
from grid.operator.runtime import Operator
from grid.operator.settings import OperatorSettings
from grid.testing.poll import eventually


async def test_operator_gossips_its_site_lanes_without_key_material(tmp_path: Path) -> None:
    mesh = DemoMesh(tmp_path, ["east"])
    await mesh.prepare()
    assert mesh.pki is not None
    site, certs = mesh.plan.sites["east"], mesh.pki.sites["east"]
    store = await SqliteStore.open(site.store)
    settings = OperatorSettings(
        site="east",
        store=f"sqlite:{site.store}",
        swim_bind="127.0.0.1:0",
        metrics_bind="127.0.0.1:0",
        overlay_dir=site.overlay_dir,
        ca=mesh.pki.ca,
        cert=certs.cert,
        key=certs.key,
    )
    operator = Operator(settings, store)
    task = asyncio.create_task(operator.run())
    try:

        def published() -> bool:
            assert not task.done(), task
            return bool(operator.ready and operator.replica.local.cert.pem)

        await eventually(published, "the operator publishes its lanes", timeout_s=20)
        local = operator.replica.local
        assert fingerprint_pem(local.cert.pem.encode()) == certs.fingerprint
        assert not contains_private_key(local.cert.pem)
        assert local.metadata.region == site.region and local.metadata.zone == site.zone
        assert dict(local.metadata.labels)[GRID_ID_LABEL] == operator.served.grid_id
        assert local.gateway.egress_address == f"127.0.0.1:{site.egress_port}"
    finally:
        operator.stop()
        await asyncio.wait_for(task, 15)
        await store.close()
