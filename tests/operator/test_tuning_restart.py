"""A changed spec.swim or seed list stops the operator for a clean restart, never ignored."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from grid.adapters.store.sqlite import SqliteStore
from grid.core.resources import GridNetwork
from grid.demo import plan as p
from grid.demo.mesh import DemoMesh
from grid.errors import Conflict
from grid.operator.runtime import Operator
from grid.operator.settings import OperatorSettings
from grid.operator.startup import StartupError
from grid.testing.poll import eventually


@pytest.mark.parametrize("status_first", [False, True], ids=["watch-first", "status-first"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("swim", {"gossipNodes": 2, "probeInterval": "1s", "suspicionTimeout": "3s"}),
        ("seeds", ["127.0.0.1:1"]),
    ],
)
async def test_a_tuning_change_ends_the_run_naming_it(
    tmp_path: Path, field: str, value: object, status_first: bool
) -> None:
    """``status_first``: a status write takes the edited spec up before its watch event."""
    mesh = DemoMesh(tmp_path, ["east"])
    await mesh.prepare()
    assert mesh.pki is not None
    site, certs = mesh.plan.sites["east"], mesh.pki.sites["east"]
    store = await SqliteStore.open(site.store, watch_poll_interval_s=0.02)
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
        await eventually(lambda: operator.ready or task.done(), "ready", timeout_s=20)
        assert not task.done()
        for _attempt in range(20):
            network = await store.get("GridNetwork", p.NETWORK)
            network["spec"][field] = value
            try:
                edited = await store.replace(network)
                if status_first:  # no await in between: the watch has not seen it yet
                    operator.served.network = GridNetwork.model_validate(edited)
                break
            except Conflict:
                continue
        with pytest.raises(StartupError, match=f"spec.{field} changed"):
            await asyncio.wait_for(task, 60)
    finally:
        if not task.done():
            operator.stop()
            await asyncio.wait_for(task, 60)
        await store.close()
