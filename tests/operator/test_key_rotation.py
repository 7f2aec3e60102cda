"""SWIM keys rotate from the cluster across a 3-site mesh with no lost membership.

Three operators run in-process on real sockets, each over its own store. The
test rotates in the three steps docs/operator.md gives, writing each site's
swimKeyRef Secret as an administrator would: the new key accepted everywhere,
then primary everywhere, then the old one dropped. After every step each
operator holds the Secret's keyring, and throughout no operator ever sees a
peer suspect, dead or left, and no frame fails authentication.
"""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

from grid.adapters.store.sqlite import SqliteStore
from grid.core.swim.members import MemberState
from grid.core.wire.keyring import Keyring
from grid.demo import plan as p
from grid.demo.mesh import DemoMesh
from grid.operator.runtime import Operator
from grid.testing.poll import eventually

from .conftest import site_settings

SITES = ["east", "west", "central"]


async def write_secret(store: SqliteStore, items: dict[str, bytes]) -> None:
    obj = await store.get("Secret", "grid-swim-key", namespace=p.NAMESPACE)
    obj["data"] = {k: base64.b64encode(v).decode() for k, v in items.items()}
    await store.replace(obj)


async def test_keys_rotate_across_three_sites_with_no_lost_membership(tmp_path: Path) -> None:
    mesh = DemoMesh(tmp_path, SITES)
    await mesh.prepare()
    assert mesh.pki is not None
    old = mesh.pki.swim_key.read_bytes()
    new = os.urandom(32)
    stores: dict[str, SqliteStore] = {}
    operators: dict[str, Operator] = {}
    tasks: list[asyncio.Task[None]] = []
    for name in SITES:
        site = mesh.plan.sites[name]
        stores[name] = await SqliteStore.open(site.store)
        settings = site_settings(mesh, name, swim_bind=f"127.0.0.1:{site.swim_port}")
        operators[name] = Operator(settings, stores[name])
        tasks.append(asyncio.create_task(operators[name].run()))
    lost: list[tuple[str, str, MemberState]] = []

    def full_mesh() -> bool:
        for task in tasks:
            assert not task.done(), task
        return all(
            op.swim is not None and op.swim.members_in(MemberState.ALIVE) == set(SITES) - {n}
            for n, op in operators.items()
        )

    async def watch() -> None:
        while True:
            for name, op in operators.items():
                for member, state in op.site_rounds.member_states().items():
                    if state is not MemberState.ALIVE:
                        lost.append((name, member, state))
            await asyncio.sleep(0.05)

    try:
        await eventually(full_mesh, "the three sites see each other", timeout_s=30)
        watcher = asyncio.create_task(watch())
        steps: list[tuple[dict[str, Any], Keyring]] = [
            ({"primary": old, "previous-1": new}, Keyring(old, [new])),
            ({"primary": new, "previous-1": old}, Keyring(new, [old])),
            ({"primary": new}, Keyring(new)),
        ]
        for items, wanted in steps:
            for name in SITES:
                await write_secret(stores[name], items)

            def installed(wanted: Keyring = wanted) -> bool:
                return all(
                    op.swim is not None and op.swim.keyring == wanted for op in operators.values()
                )

            await eventually(installed, "every operator holds the new keyring", timeout_s=10)
            # A few protocol periods under the new keyring (probe interval 500 ms).
            for op in operators.values():
                assert op.swim is not None
                start = op.swim.counters.datagrams_received
                await eventually(
                    lambda op=op, start=start: op.swim.counters.datagrams_received > start + 5,
                    "datagrams keep flowing",
                    timeout_s=10,
                )
        watcher.cancel()
        assert lost == []
        for op in operators.values():
            assert op.swim is not None
            assert op.swim.counters.datagrams_dropped["auth_failed"] == 0
            assert op.swim.counters.streams_dropped["auth_failed"] == 0
        assert full_mesh()
    finally:
        for op in operators.values():
            op.stop()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 20)
        for store in stores.values():
            await store.close()
