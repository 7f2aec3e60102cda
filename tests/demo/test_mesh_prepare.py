"""`DemoMesh.prepare`: every run starts from fresh certificates, stores and ports."""

import base64
from pathlib import Path

import yaml

from grid.adapters.store.sqlite import SqliteStore
from grid.core.identity import parse_keys
from grid.core.overlay.consumer import client_auth_filter
from grid.core.resources.network_spec import ConsumerSpec
from grid.demo.mesh import DemoMesh
from grid.demo.plan import CLIENT_KEYS_SECRET, DEMO_BUDGETS, NAMESPACE, NETWORK


async def _pins(store_path: Path) -> dict[str, str]:
    store = await SqliteStore.open(store_path)
    try:
        sites = await store.list("GridSite")
        return {s["metadata"]["name"]: s["spec"]["trust"]["certFingerprint"] for s in sites}
    finally:
        await store.close()


async def test_a_second_run_replaces_what_the_first_left(tmp_path: Path) -> None:
    first = DemoMesh(tmp_path, ["east", "west"])
    await first.prepare()
    (tmp_path / "demo.json").write_text("{}")
    second = DemoMesh(tmp_path, ["east", "west"])
    await second.prepare()
    assert second.pki is not None and first.pki is not None
    pins = await _pins(second.plan.sites["east"].store)
    assert pins == {name: paths.fingerprint for name, paths in second.pki.sites.items()}
    assert pins["east"] != first.pki.sites["east"].fingerprint
    assert not (tmp_path / "demo.json").exists()


async def test_the_demo_gateways_authenticate_clients_by_the_keys_of_demo_json(
    tmp_path: Path,
) -> None:
    mesh = DemoMesh(tmp_path, ["east", "west"])
    await mesh.prepare()
    try:
        assert set(mesh.api_keys) == set(DEMO_BUDGETS)
        assert len(set(mesh.api_keys.values())) == len(DEMO_BUDGETS)
        store = await SqliteStore.open(mesh.plan.sites["west"].store)
        try:
            network = await store.get("GridNetwork", NETWORK)
            secret = await store.get("Secret", CLIENT_KEYS_SECRET[0], namespace=NAMESPACE)
        finally:
            await store.close()
        for ref in network["spec"]["gatewayRefs"]:
            auth = ref["consumerConfig"]["clientAuth"]
            assert auth["mode"] == "apiKey"
            assert (auth["secretRef"]["name"], auth["secretRef"]["key"]) == CLIENT_KEYS_SECRET
        stored = base64.b64decode(secret["data"][CLIENT_KEYS_SECRET[1]])
        mounted = mesh.credentials.joinpath(*CLIENT_KEYS_SECRET).read_bytes()
        assert stored == mounted
        keys = parse_keys(yaml.safe_load(mounted))
        for tenant, key in mesh.api_keys.items():
            assert keys.tenant(key) == tenant
            assert key.encode() not in mounted  # only the digest is kept
        assert keys.tenant("grid-not-a-demo-key") is None
        # The gateways' rendered praxis.yaml points at the mounted keys file.
        section = client_auth_filter(
            ConsumerSpec.model_validate(network["spec"]["gatewayRefs"][0]["consumerConfig"]), None
        )
        assert Path(section["keys_file"]) == mesh.credentials.joinpath(*CLIENT_KEYS_SECRET)
    finally:
        await mesh.stop()
