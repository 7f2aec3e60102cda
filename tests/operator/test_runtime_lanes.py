"""An in-process operator publishes its site lanes: geography, egress, gridId and public cert."""

from __future__ import annotations

from pathlib import Path

from grid.adapters.store.sqlite import SqliteStore
from grid.core.routing.mesh_view import GRID_ID_LABEL
from grid.core.trust import contains_private_key, fingerprint_pem
from grid.demo.mesh import DemoMesh
from grid.operator.runtime import Operator
from grid.testing.poll import eventually

from .conftest import running, site_settings


async def test_operator_gossips_its_site_lanes_without_key_material(tmp_path: Path) -> None:
    mesh = DemoMesh(tmp_path, ["east"])
    await mesh.prepare()
    assert mesh.pki is not None
    site, certs = mesh.plan.sites["east"], mesh.pki.sites["east"]
    store = await SqliteStore.open(site.store)
    operator = Operator(site_settings(mesh, "east"), store)
    try:
        async with running(operator) as task:

            def published() -> bool:
                assert not task.done(), task
                return bool(operator.ready and operator.replica.local.cert.pem)

            await eventually(published, "the operator publishes its lanes", timeout_s=20)
            local = operator.replica.local
            assert fingerprint_pem(local.cert.pem.encode()) == certs.fingerprint
            assert not contains_private_key(local.cert.pem)
            assert local.metadata.region == site.region and local.metadata.zone == site.zone
            assert dict(local.metadata.labels)[GRID_ID_LABEL] == operator.served.grid_id
            assert local.metadata.signal_transport == operator.served.mode == "gossip"
            assert local.gateway.egress_address == f"127.0.0.1:{site.egress_port}"
    finally:
        await store.close()


async def test_a_site_without_geography_gossips_the_network_region_and_zone(
    tmp_path: Path,
) -> None:
    mesh = DemoMesh(tmp_path, ["east"])
    await mesh.prepare()
    site = mesh.plan.sites["east"]
    store = await SqliteStore.open(site.store)
    own = await store.get("GridSite", "east")
    for field in ("region", "zone"):
        own["spec"].pop(field, None)
    await store.replace(own)
    (net,) = await store.list("GridNetwork")
    net["spec"]["region"] = "us-west"
    await store.replace(net)
    operator = Operator(site_settings(mesh, "east"), store)
    try:
        async with running(operator) as task:

            def geography() -> tuple[str, str]:
                assert not task.done(), task
                metadata = operator.replica.local.metadata
                return metadata.region, metadata.zone

            await eventually(lambda: geography() == ("us-west", ""), "the network's region")
            net = await store.get("GridNetwork", net["metadata"]["name"])
            net["spec"]["zone"] = "us-west-2b"
            await store.replace(net)
            await eventually(lambda: geography() == ("us-west", "us-west-2b"), "its new zone")
    finally:
        await store.close()
