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
from grid.operator.startup import StartupError
from grid.testing.poll import eventually

from .conftest import running, site_settings


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
    store = await SqliteStore.open(mesh.plan.sites["east"].store, watch_poll_interval_s=0.02)
    operator = Operator(site_settings(mesh, "east"), store)
    try:
        async with running(operator) as task:
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
        await store.close()
