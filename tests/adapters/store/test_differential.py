"""The SQLite store and the in-memory fake agree on any sequence of operations."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.adapters.store.port import ResourceStore
from grid.adapters.store.sqlite import SqliteStore
from grid.errors import GridError
from grid.testing.store import InMemoryStore

NAMES = st.sampled_from(["east", "west"])
OPS = st.one_of(
    st.tuples(st.just("create"), NAMES, st.sampled_from(["eu", "us"])),
    st.tuples(st.just("replace"), NAMES, st.sampled_from(["eu", "us"]), st.booleans()),
    st.tuples(st.just("relabel"), NAMES, st.sampled_from(["a", "b"])),
    st.tuples(st.just("status"), NAMES, st.sampled_from(["Pending", "Active"]), st.booleans()),
    st.tuples(st.just("delete"), NAMES),
)


def site(name: str, region: str) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "GridSite",
        "metadata": {"name": name},
        "spec": {"gridNetworkRef": "grid-demo", "region": region},
    }


def normalized(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("uid", "creationTimestamp")}
    return {**obj, "metadata": meta}


async def run(store: ResourceStore, ops: list[tuple[Any, ...]]) -> list[Any]:
    outcomes: list[Any] = []
    for op, name, *args in ops:
        try:
            if op == "create":
                result = await store.create(site(name, args[0]))
            elif op == "delete":
                result = await store.delete("GridSite", name)
            else:
                current = await store.get("GridSite", name)
                if op == "replace":
                    stale = args[1] and current["metadata"]["resourceVersion"] != "1"
                    version = "1" if stale else current["metadata"]["resourceVersion"]
                    body = {**current, "spec": {**current["spec"], "region": args[0]}}
                    body["metadata"] = {**current["metadata"], "resourceVersion": version}
                    result = await store.replace(body)
                elif op == "relabel":
                    body = {
                        **current,
                        "metadata": {**current["metadata"], "labels": {"l": args[0]}},
                    }
                    result = await store.replace(body)
                else:
                    version = current["metadata"]["resourceVersion"] if args[1] else None
                    result = await store.patch_status("GridSite", name, {"phase": args[0]}, version)
            outcomes.append(normalized(result))
        except GridError as exc:
            outcomes.append(exc.code)
    listed = [normalized(o) for o in await store.list("GridSite")]
    events: list[Any] = []
    head = max(
        (int(o["metadata"]["resourceVersion"]) for o in outcomes if isinstance(o, dict)), default=0
    )
    if head:
        async with contextlib.aclosing(store.watch("GridSite", "0")) as stream:
            async for event in stream:
                events.append((event.type.value, normalized(event.object)))
                if int(event.resource_version) >= head:
                    break
    return [outcomes, listed, events]


@settings(max_examples=30, deadline=None)
@given(st.lists(OPS, max_size=12))
def test_sqlite_and_memory_stores_agree(ops: list[tuple[Any, ...]]) -> None:
    async def both() -> tuple[list[Any], list[Any]]:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = await SqliteStore.open(Path(tmp) / "store.db")
            memory = InMemoryStore()
            try:
                return (
                    await asyncio.wait_for(run(sqlite, ops), 10),
                    await asyncio.wait_for(run(memory, ops), 10),
                )
            finally:
                await sqlite.close()
                await memory.close()

    on_disk, in_memory = asyncio.run(both())
    assert on_disk == in_memory
