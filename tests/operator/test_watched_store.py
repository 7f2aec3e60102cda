"""`WatchedStore`: validated models are kept between changes, and only while watched."""

from __future__ import annotations

import asyncio
from typing import Any

from grid.core.resources import GridSite
from grid.operator.watched_store import WatchedStore, read_models
from grid.testing.poll import eventually
from grid.testing.store import InMemoryStore


def site(name: str, region: str = "us-east-1") -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "GridSite",
        "metadata": {"name": name},
        "spec": {"gridNetworkRef": "prod", "region": region},
    }


class CountingStore(InMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.lists = 0

    async def list(self, kind: str, *args: Any, **kwargs: Any) -> Any:
        self.lists += 1
        return await super().list(kind, *args, **kwargs)


async def test_reads_are_kept_while_watched_and_dropped_on_every_change() -> None:
    inner = CountingStore()
    store = WatchedStore(inner)
    await inner.create(site("east"))
    # Unwatched: every read goes to the store.
    await store.models("GridSite", GridSite)
    await store.models("GridSite", GridSite)
    assert inner.lists == 2
    seen: list[str] = []

    async def follow() -> None:
        async for event in store.watch("GridSite"):
            seen.append(event.object["metadata"]["name"])

    task = asyncio.ensure_future(follow())
    try:
        await eventually(lambda: seen == ["east"], "the watch saw east", interval_s=0.005)
        base = inner.lists
        first = await store.models("GridSite", GridSite)
        again = await store.models("GridSite", GridSite)
        assert [s.name for s in again] == ["east"] and again[0] is first[0]
        assert inner.lists == base + 1
        # Another writer's change reaches the kept models with its watch event.
        await inner.create(site("west"))
        await eventually(lambda: seen == ["east", "west"], "the watch saw west", interval_s=0.005)
        assert [s.name for s in await store.models("GridSite", GridSite)] == ["east", "west"]
        assert inner.lists == base + 2
        # A write through the store is read back at once, before its event arrives.
        await store.patch_status("GridSite", "west", {"phase": "Active"})
        (west,) = await read_models(store, "GridSite", GridSite, "west")
        assert west.phase.value == "Active"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # The watch ended: nothing is kept any more.
    before = inner.lists
    await store.models("GridSite", GridSite)
    await store.models("GridSite", GridSite)
    assert inner.lists == before + 2


async def test_a_plain_store_reads_and_validates_every_time() -> None:
    store = InMemoryStore()
    await store.create(site("east"))
    (east,) = await read_models(store, "GridSite", GridSite)
    assert east.name == "east"
    assert (await read_models(store, "GridSite", GridSite, "east"))[0].name == "east"
