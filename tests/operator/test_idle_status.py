"""An idle operator writes no status: 30 seconds of rounds, counted, in virtual time.

One site's operator runs on real sockets over a counting in-memory store. Once
its network, site and providers have settled, the test drives 30 seconds' worth
of rounds (one render round and one site round per simulated second, the site
controller's clock advanced by hand) and counts every status write, whichever
loop made it. An idle truth writes nothing, so the count is zero.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from grid.adapters.store.sqlite import SqliteStore
from grid.core.resources import GridNetwork
from grid.demo.mesh import DemoMesh
from grid.operator.runtime import Operator
from grid.testing.poll import eventually

from .conftest import CountingStore, site_settings

KINDS = ("GridNetwork", "GridSite", "InferenceProvider", "Secret")


async def test_thirty_idle_seconds_write_no_status(tmp_path: Path, store: CountingStore) -> None:
    mesh = DemoMesh(tmp_path, ["east"])
    await mesh.prepare()
    assert mesh.pki is not None
    site = mesh.plan.sites["east"]
    source = await SqliteStore.open(site.store)
    for kind in KINDS:
        for obj in await source.list(kind):
            obj["metadata"].pop("resourceVersion", None)
            status = obj.pop("status", None)
            await store.create(obj)
            assert status is None
    await source.close()
    settings = site_settings(
        mesh,
        "east",
        store="memory:",
        render_interval_s=3600,
        site_probe_interval_s=3600,
    )
    operator = Operator(settings, store)
    clock = [0.0]
    operator.sites._clock = lambda: clock[0]
    task = asyncio.create_task(operator.run())
    try:

        def active() -> bool:
            assert not task.done(), task
            network = operator.served.network
            return operator.ready and network is not None and network.phase.value == "Active"

        await eventually(active, "the network is Active", timeout_s=20)
        # Let the first rounds settle: the site goes Active, providers get a phase.
        for _ in range(5):
            await one_second(operator, clock)
        before = sum(n for (op, _k), n in store.calls.items() if op == "patch_status")
        for _ in range(30):
            await one_second(operator, clock)
        after = sum(n for (op, _k), n in store.calls.items() if op == "patch_status")
        assert after == before, store.calls
        (obj,) = await store.list("GridNetwork")
        network = GridNetwork.model_validate(obj)
        assert network.status is not None
        assert {c.type: c.status for c in network.status.conditions} == {
            "OverlaysDistributed": "True",
            "SitesReachable": "True",
            "SecretsResolved": "True",
            "Ready": "True",
        }
    finally:
        operator.stop()
        await asyncio.wait_for(task, 15)


async def one_second(operator: Operator, clock: list[float]) -> None:
    """One simulated second: a site round and a render round."""
    clock[0] += 1.0
    await operator.site_rounds.round()
    await operator._render_round()
