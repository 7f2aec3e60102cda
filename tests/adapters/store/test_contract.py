"""The ResourceStore contract, run against the SQLite store and the in-memory fake."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from grid.adapters.store.port import EventType, Expired, ResourceStore, WatchEvent
from grid.errors import AlreadyExists, Conflict, NotFound, ValidationError

API = "grid.praxis-proxy.io/v1alpha1"


def network(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "GridNetwork",
        "metadata": {"name": name},
        "spec": spec or {"region": "eu"},
    }


def site(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "GridSite",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"gridNetworkRef": "grid-demo"},
    }


def config_map(name: str, namespace: str | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


async def take(events: AsyncIterator[WatchEvent], count: int) -> list[WatchEvent]:
    got: list[WatchEvent] = []

    async def collect() -> None:
        async for event in events:
            got.append(event)
            if len(got) == count:
                return

    await asyncio.wait_for(collect(), 5.0)
    return got


async def test_create_stamps_server_metadata_and_ignores_status(store: ResourceStore) -> None:
    obj = network("grid-demo")
    obj["status"] = {"phase": "Active"}
    created = await store.create(obj)
    meta = created["metadata"]
    assert meta["generation"] == 1
    assert int(meta["resourceVersion"]) >= 1
    assert len(meta["uid"]) == 36
    assert meta["creationTimestamp"].endswith("Z")
    assert "status" not in created
    assert await store.get("GridNetwork", "grid-demo") == created


async def test_create_of_a_taken_name_raises_already_exists(store: ResourceStore) -> None:
    await store.create(network("grid-demo"))
    with pytest.raises(AlreadyExists):
        await store.create(network("grid-demo"))


async def test_create_rejects_a_resource_version_and_a_bad_envelope(store: ResourceStore) -> None:
    obj = network("grid-demo")
    obj["metadata"]["resourceVersion"] = "7"
    with pytest.raises(ValidationError) as bad_rv:
        await store.create(obj)
    assert bad_rv.value.path == "metadata.resourceVersion"
    with pytest.raises(ValidationError) as bad_name:
        await store.create(network("Not_A_Name"))
    assert bad_name.value.path == "metadata.name"
    with pytest.raises(ValidationError) as bad_kind:
        await store.create({**network("x"), "kind": "Pod"})
    assert bad_kind.value.path == "kind"
    with pytest.raises(ValidationError) as bad_api:
        await store.create({**network("x"), "apiVersion": "v1"})
    assert bad_api.value.path == "apiVersion"


async def test_get_and_delete_of_a_missing_object_raise_not_found(store: ResourceStore) -> None:
    with pytest.raises(NotFound):
        await store.get("GridSite", "nowhere")
    with pytest.raises(NotFound):
        await store.delete("GridSite", "nowhere")
    with pytest.raises(NotFound):
        await store.patch_status("GridSite", "nowhere", {"phase": "Pending"})


async def test_resource_versions_increase_store_wide(store: ResourceStore) -> None:
    a = await store.create(network("a"))
    b = await store.create(site("b"))
    c = await store.patch_status("GridNetwork", "a", {"phase": "Pending"})
    d = await store.delete("GridSite", "b")
    versions = [int(o["metadata"]["resourceVersion"]) for o in (a, b, c, d)]
    assert versions == sorted(versions)
    assert len(set(versions)) == 4


async def test_list_orders_by_name_and_filters_by_label_selector(store: ResourceStore) -> None:
    await store.create(site("west", {"tier": "edge", "zone": "a"}))
    await store.create(site("east", {"tier": "edge"}))
    await store.create(site("core", {"tier": "dc"}))
    names = [o["metadata"]["name"] for o in await store.list("GridSite")]
    assert names == ["core", "east", "west"]
    edge = await store.list("GridSite", {"tier": "edge"})
    assert [o["metadata"]["name"] for o in edge] == ["east", "west"]
    picked = await store.list("GridSite", "tier=edge,!zone")
    assert [o["metadata"]["name"] for o in picked] == ["east"]
    not_edge = await store.list("GridSite", "tier!=edge")
    assert [o["metadata"]["name"] for o in not_edge] == ["core"]
    assert await store.list("GridNetwork") == []


async def test_namespaced_kinds_default_to_default_and_are_separate(store: ResourceStore) -> None:
    one = await store.create(config_map("overlay", data="1"))
    two = await store.create(config_map("overlay", "edge", data="2"))
    assert one["metadata"]["namespace"] == "default"
    assert (await store.get("ConfigMap", "overlay"))["data"] == {"data": "1"}
    assert (await store.get("ConfigMap", "overlay", namespace="edge")) == two
    assert len(await store.list("ConfigMap")) == 2
    assert len(await store.list("ConfigMap", namespace="edge")) == 1
    with pytest.raises(ValidationError):
        await store.get("GridSite", "x", namespace="edge")


async def test_secret_string_data_is_folded_into_base64_data(store: ResourceStore) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "token", "namespace": "praxis"},
        "stringData": {"token": "abc"},
    }
    stored = await store.create(secret)
    assert stored["data"] == {"token": "YWJj"}
    assert "stringData" not in stored


async def test_replace_requires_a_current_resource_version(store: ResourceStore) -> None:
    created = await store.create(network("grid-demo"))
    fresh = {**created, "spec": {"region": "us"}}
    updated = await store.replace(fresh)
    assert updated["spec"] == {"region": "us"}
    stale = {**created, "spec": {"region": "ap"}}
    with pytest.raises(Conflict):
        await store.replace(stale)
    unversioned = network("grid-demo", region="ap")
    with pytest.raises(ValidationError):
        await store.replace(unversioned)
    missing = {**network("other"), "metadata": {"name": "other", "resourceVersion": "1"}}
    with pytest.raises(NotFound):
        await store.replace(missing)
    assert (await store.get("GridNetwork", "grid-demo"))["spec"] == {"region": "us"}


async def test_generation_bumps_only_on_spec_change(store: ResourceStore) -> None:
    created = await store.create(network("grid-demo"))
    relabeled = await store.replace(
        {**created, "metadata": {**created["metadata"], "labels": {"team": "a"}}}
    )
    assert relabeled["metadata"]["generation"] == 1
    assert relabeled["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    patched = await store.patch_status("GridNetwork", "grid-demo", {"phase": "Active"})
    assert patched["metadata"]["generation"] == 1
    respecced = await store.replace({**patched, "spec": {"region": "us"}})
    assert respecced["metadata"]["generation"] == 2
    assert respecced["status"] == {"phase": "Active"}
    assert respecced["metadata"]["uid"] == created["metadata"]["uid"]
    assert respecced["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]


async def test_identical_writes_change_nothing(store: ResourceStore) -> None:
    created = await store.create(network("grid-demo"))
    same = await store.replace(dict(created))
    assert same == created
    first = await store.patch_status("GridNetwork", "grid-demo", {"phase": "Pending"})
    again = await store.patch_status("GridNetwork", "grid-demo", {"phase": "Pending"})
    assert again == first


async def test_patch_status_merges_and_is_optimistic_with_a_version(store: ResourceStore) -> None:
    await store.create(network("grid-demo"))
    one = await store.patch_status(
        "GridNetwork", "grid-demo", {"phase": "Pending", "reason": "Start", "conditions": [1, 2]}
    )
    two = await store.patch_status(
        "GridNetwork",
        "grid-demo",
        {"phase": "Active", "reason": None, "conditions": [3]},
        one["metadata"]["resourceVersion"],
    )
    assert two["status"] == {"phase": "Active", "conditions": [3]}
    with pytest.raises(Conflict):
        await store.patch_status(
            "GridNetwork", "grid-demo", {"phase": "Degraded"}, one["metadata"]["resourceVersion"]
        )
    assert (await store.get("GridNetwork", "grid-demo"))["status"]["phase"] == "Active"


async def test_concurrent_optimistic_writers_have_exactly_one_winner(store: ResourceStore) -> None:
    created = await store.create(network("grid-demo"))
    rv = created["metadata"]["resourceVersion"]

    async def write(phase: str) -> str:
        try:
            await store.patch_status("GridNetwork", "grid-demo", {"phase": phase}, rv)
        except Conflict:
            return "conflict"
        return "ok"

    outcomes = await asyncio.gather(*(write(p) for p in ("Pending", "Active", "Degraded")))
    assert sorted(outcomes) == ["conflict", "conflict", "ok"]


async def test_delete_returns_the_last_state(store: ResourceStore) -> None:
    await store.create(site("east"))
    gone = await store.delete("GridSite", "east")
    assert gone["metadata"]["name"] == "east"
    with pytest.raises(NotFound):
        await store.get("GridSite", "east")
    recreated = await store.create(site("east"))
    assert recreated["metadata"]["uid"] != gone["metadata"]["uid"]


async def test_watch_starts_with_a_snapshot_then_streams_changes_in_order(
    store: ResourceStore,
) -> None:
    await store.create(site("b"))
    await store.create(site("a"))
    async with contextlib.aclosing(store.watch("GridSite")) as events:
        first = await take(events, 2)
        assert [(e.type, e.object["metadata"]["name"]) for e in first] == [
            (EventType.ADDED, "a"),
            (EventType.ADDED, "b"),
        ]
        await store.create(network("ignored-other-kind"))
        await store.patch_status("GridSite", "a", {"phase": "Pending"})
        await store.patch_status("GridSite", "a", {"phase": "Pending"})  # no-op: no event
        await store.delete("GridSite", "b")
        await store.create(site("c"))
        rest = await take(events, 3)
    assert [(e.type, e.object["metadata"]["name"]) for e in rest] == [
        (EventType.MODIFIED, "a"),
        (EventType.DELETED, "b"),
        (EventType.ADDED, "c"),
    ]
    assert rest[0].object["status"] == {"phase": "Pending"}
    versions = [int(e.resource_version) for e in rest]
    assert versions == sorted(versions)
    assert all(e.resource_version == e.object["metadata"]["resourceVersion"] for e in rest)


async def test_watch_resumes_after_a_resource_version_with_nothing_missed(
    store: ResourceStore,
) -> None:
    created = await store.create(site("east"))
    for phase in ("Pending", "Discovered", "Connecting", "Active"):
        await store.patch_status("GridSite", "east", {"phase": phase})
    await store.delete("GridSite", "east")
    since = created["metadata"]["resourceVersion"]
    async with contextlib.aclosing(store.watch("GridSite", since)) as events:
        got = await take(events, 5)
    phases = [e.object.get("status", {}).get("phase") for e in got[:4]]
    assert phases == ["Pending", "Discovered", "Connecting", "Active"]
    assert got[4].type is EventType.DELETED


async def test_a_waiting_watch_wakes_on_a_later_write(store: ResourceStore) -> None:
    async with contextlib.aclosing(store.watch("InferenceProvider")) as events:
        waiter = asyncio.ensure_future(take(events, 1))
        await asyncio.sleep(0)
        obj = {
            "apiVersion": API,
            "kind": "InferenceProvider",
            "metadata": {"name": "vllm"},
            "spec": {"gridNetworkRef": "grid-demo"},
        }
        await store.create(obj)
        (event,) = await waiter
    assert event.type is EventType.ADDED
    assert event.object["metadata"]["name"] == "vllm"


async def test_watch_from_a_trimmed_version_raises_expired(store_factory: Any) -> None:
    store = await store_factory(event_log_retention=5)
    first = await store.create(site("east"))
    for i in range(30):
        await store.patch_status("GridSite", "east", {"observed": i})
    with pytest.raises(Expired):
        async with contextlib.aclosing(
            store.watch("GridSite", first["metadata"]["resourceVersion"])
        ) as events:
            await take(events, 1)
    current = await store.get("GridSite", "east")
    async with contextlib.aclosing(
        store.watch("GridSite", current["metadata"]["resourceVersion"])
    ) as events:
        waiter = asyncio.ensure_future(take(events, 1))
        await store.patch_status("GridSite", "east", {"observed": 99})
        (event,) = await waiter
    assert event.object["status"]["observed"] == 99


async def test_values_json_cannot_carry_are_refused_alike(store: ResourceStore) -> None:
    with pytest.raises(ValidationError) as bad_spec:
        await store.create(network("grid-demo", ratio=float("nan")))
    assert bad_spec.value.path == "spec"
    await store.create(network("grid-demo", zones=("a", "b")))
    assert (await store.get("GridNetwork", "grid-demo"))["spec"] == {"zones": ["a", "b"]}
    with pytest.raises(ValidationError) as bad_status:
        await store.patch_status("GridNetwork", "grid-demo", {"seen": {1, 2}})
    assert bad_status.value.path == "status"
