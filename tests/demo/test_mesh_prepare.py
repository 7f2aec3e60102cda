"""`DemoMesh.prepare`: every run starts from fresh certificates, stores and ports."""

from pathlib import Path

from grid.adapters.store.sqlite import SqliteStore
from grid.demo.mesh import DemoMesh


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
