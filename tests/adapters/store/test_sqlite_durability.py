"""SQLite-specific behaviour: durability across reopen and several openers on one file."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.adapters.store.port import EventType, Expired
from grid.adapters.store.sqlite import SqliteStore
from grid.adapters.store.url import DEFAULT_STORE_URL, open_store, parse_store_url
from grid.errors import GridError, ValidationError
from grid.testing.kube_api import KubeApiEmulator
from grid.testing.poll import eventually


def provider(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "InferenceProvider",
        "metadata": {"name": name},
        "spec": {"gridNetworkRef": "grid-demo", "backendKind": "local"},
    }


def site_doc(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "GridSite",
        "metadata": {"name": name},
        "spec": {"gridNetworkRef": "grid-demo"},
    }


async def test_objects_versions_and_event_log_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "store.db"
    store = await SqliteStore.open(path)
    created = await store.create(provider("vllm"))
    patched = await store.patch_status("InferenceProvider", "vllm", {"phase": "Available"})
    await store.close()

    reopened = await SqliteStore.open(path)
    try:
        assert await reopened.get("InferenceProvider", "vllm") == patched
        later = await reopened.create(provider("tgi"))
        assert int(later["metadata"]["resourceVersion"]) > int(
            patched["metadata"]["resourceVersion"]
        )
        since = created["metadata"]["resourceVersion"]
        async with contextlib.aclosing(reopened.watch("InferenceProvider", since)) as events:
            first = await anext(events)
            second = await anext(events)
        assert (first.type, first.object["status"]) == (EventType.MODIFIED, {"phase": "Available"})
        assert (second.type, second.object["metadata"]["name"]) == (EventType.ADDED, "tgi")
    finally:
        await reopened.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_a_watcher_sees_writes_made_through_another_connection(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    watcher_side = await SqliteStore.open(path, watch_poll_interval_s=0.02)
    writer_side = await SqliteStore.open(path)
    try:
        async with contextlib.aclosing(watcher_side.watch("InferenceProvider")) as events:
            waiter = asyncio.ensure_future(anext(events))
            await writer_side.create(provider("vllm"))
            event = await asyncio.wait_for(waiter, 5.0)
        assert event.object["metadata"]["name"] == "vllm"
        stale = await watcher_side.get("InferenceProvider", "vllm")
        await writer_side.patch_status("InferenceProvider", "vllm", {"phase": "Available"})
        with pytest.raises(GridError) as conflict:
            await watcher_side.replace({**stale, "spec": {"gridNetworkRef": "other"}})
        assert conflict.value.code == "conflict"
    finally:
        await watcher_side.close()
        await writer_side.close()


def big_configmap(text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "grid-overlay", "namespace": "grid"},
        "data": {"grid-overlay.json": text * (70 * 1024 // len(text) + 1)},
    }


async def test_a_large_object_written_elsewhere_is_read_afresh_not_from_the_kept_copy(
    tmp_path: Path,
) -> None:
    """A replace starts from the kept parse only while the row is still at its version."""
    path = tmp_path / "store.db"
    ours = await SqliteStore.open(path)
    theirs = await SqliteStore.open(path)
    try:
        written = await ours.create(big_configmap("a"))
        written = await ours.replace({**big_configmap("b"), "metadata": written["metadata"]})
        assert ours.parsed.hits == 1
        # Unchanged data: the kept copy stands in for the stored row, and is not handed out.
        same = await ours.replace({**big_configmap("b"), "metadata": written["metadata"]})
        assert ours.parsed.hits == 2
        assert same == written and same is not written
        same["data"]["grid-overlay.json"] = "changed by the caller"
        assert (
            await ours.replace({**big_configmap("b"), "metadata": written["metadata"]}) == written
        )
        assert ours.parsed.hits == 3
        # Another opener of the file moves the row on; ours must see its write.
        mine = await theirs.get("ConfigMap", "grid-overlay", namespace="grid")
        moved = await theirs.patch_status(
            "ConfigMap", "grid-overlay", {"by": "them"}, namespace="grid"
        )
        assert mine["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]
        later = await ours.replace({**big_configmap("c"), "metadata": moved["metadata"]})
        assert ours.parsed.hits == 3
        assert later["status"] == {"by": "them"}
        again = await ours.get("ConfigMap", "grid-overlay", namespace="grid")
        assert again == later
        assert again["data"]["grid-overlay.json"].startswith("ccc")
    finally:
        await ours.close()
        await theirs.close()


async def test_the_event_log_is_bounded_by_size_and_a_resume_before_it_is_expired(
    tmp_path: Path,
) -> None:
    """Large bodies are trimmed by their summed size, long before the count bound."""
    path = tmp_path / "store.db"
    store = await SqliteStore.open(path, event_log_bytes=400_000)
    try:
        first = written = await store.create(big_configmap("a"))  # about 72 kB a body
        for step in "bcdefghijk":
            written = await store.replace({**big_configmap(step), "metadata": written["metadata"]})
        with sqlite3.connect(path) as conn:
            held, count = conn.execute("SELECT SUM(length(body)), COUNT(*) FROM events").fetchone()
            kept = conn.execute("SELECT value FROM meta WHERE key='event_bytes'").fetchone()[0]
        assert held <= 400_000 and int(kept) == held
        assert 3 <= count < 11
        with pytest.raises(Expired):
            async with contextlib.aclosing(
                store.watch("ConfigMap", first["metadata"]["resourceVersion"])
            ) as events:
                await anext(events)
        # A resume within what is kept sees the newest change.
        since = str(int(written["metadata"]["resourceVersion"]) - 1)
        async with contextlib.aclosing(store.watch("ConfigMap", since)) as events:
            event = await anext(events)
        assert event.object["data"]["grid-overlay.json"].startswith("kkk")
    finally:
        await store.close()


async def test_a_file_without_the_summed_size_counts_it_once_on_open(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = await SqliteStore.open(path)
    await store.create(provider("vllm"))
    await store.create(provider("tgi"))
    await store.close()
    with sqlite3.connect(path) as conn:
        held = conn.execute("SELECT SUM(length(body)) FROM events").fetchone()[0]
        conn.execute("DELETE FROM meta WHERE key='event_bytes'")
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 16_384
    reopened = await SqliteStore.open(path)
    await reopened.create(provider("sglang"))
    await reopened.close()
    with sqlite3.connect(path) as conn:
        kept = conn.execute("SELECT value FROM meta WHERE key='event_bytes'").fetchone()[0]
        now = conn.execute("SELECT SUM(length(body)) FROM events").fetchone()[0]
    assert held < int(kept) == now


async def test_close_ends_an_open_watch(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "store.db", watch_poll_interval_s=0.02)
    await store.create(provider("vllm"))
    events = store.watch("InferenceProvider")
    snapshot_seen = asyncio.Event()

    async def drain() -> int:
        count = 0
        async for _ in events:
            count += 1
            snapshot_seen.set()  # the loop asks for the next event at once: the watch is open
        return count

    task = asyncio.ensure_future(drain())
    await asyncio.wait_for(snapshot_seen.wait(), 5.0)
    await store.close()
    assert await asyncio.wait_for(task, 5.0) == 1


async def test_quiet_watchers_share_one_poll_and_a_write_wakes_only_its_kind(
    tmp_path: Path,
) -> None:
    """Four quiet watchers share one poll, which reads nothing while the file is
    unchanged; a write from this process, or from another opener, wakes the
    watcher of its kind alone."""
    store = await SqliteStore.open(tmp_path / "store.db", watch_poll_interval_s=0.02)
    queries: list[str] = []
    run = store._run

    async def counted(fn: Any, *args: Any) -> Any:
        queries.append(fn.__name__)
        return await run(fn, *args)

    store._run = counted  # type: ignore[method-assign]
    kinds = ["InferenceProvider", "GridSite", "Secret", "GridNetwork"]
    seen: dict[str, list[str]] = {kind: [] for kind in kinds}

    async def follow(kind: str) -> None:
        async for event in store.watch(kind):
            seen[kind].append(event.object["metadata"]["name"])

    tasks = [asyncio.ensure_future(follow(kind)) for kind in kinds]
    poll = store._poll
    try:
        await eventually(lambda: poll.ticks >= 40, "40 poll ticks")
        own = queries.count("_events_sync")
        assert own == len(kinds), queries
        # One poll for the four of them, and once the file has settled (its
        # modification time 0.1 s in the past, five ticks) no read at all.
        assert queries.count("_heads_sync") == poll.reads <= 10 < poll.ticks, (poll.reads, queries)
        await store.create(provider("vllm"))
        await eventually(lambda: seen["InferenceProvider"], "the provider's watcher woke")
        # The create wakes its kind's watcher only; the others learn of it from a poll
        # and run no query of their own.
        assert queries.count("_events_sync") == own + 1, queries
        other = await SqliteStore.open(tmp_path / "store.db")
        try:
            await other.create(site_doc("west"))
        finally:
            await other.close()
        await eventually(lambda: seen["GridSite"], "the site's watcher saw the other's write")
        assert seen == {
            "InferenceProvider": ["vllm"],
            "GridSite": ["west"],
            "Secret": [],
            "GridNetwork": [],
        }
        assert queries.count("_events_sync") == own + 2, queries
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await store.close()


def test_store_urls_parse_and_unknown_ones_are_refused() -> None:
    assert parse_store_url("sqlite:/var/lib/grid.db").path == Path("/var/lib/grid.db")
    assert parse_store_url("sqlite:///var/lib/grid.db").path == Path("/var/lib/grid.db")
    assert parse_store_url(DEFAULT_STORE_URL).path == Path(".grid/store.db")
    assert parse_store_url("kubernetes").scheme == "kubernetes"
    for bad in ("sqlite:", "postgres://x", ""):
        with pytest.raises(ValidationError):
            parse_store_url(bad)


async def test_the_kubernetes_store_opens_from_a_kubeconfig_or_says_why_not(
    tmp_path: Path,
) -> None:
    with pytest.raises(GridError, match="cannot load Kubernetes configuration") as missing:
        await open_store("kubernetes", kubeconfig=tmp_path / "absent.yaml")
    assert missing.value.code == "store_unavailable"
    emulator = KubeApiEmulator()
    await emulator.start()
    try:
        config = tmp_path / "kubeconfig.yaml"
        config.write_text(yaml.safe_dump(emulator.kubeconfig()))
        store = await open_store("kubernetes", kubeconfig=config)
        try:
            assert await store.list("GridSite") == []
        finally:
            await store.close()
    finally:
        await emulator.stop()


async def test_a_watch_sees_grid_apply_run_in_another_process(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    manifest = tmp_path / "provider.yaml"
    manifest.write_text(
        "apiVersion: grid.praxis-proxy.io/v1alpha1\n"
        "kind: InferenceProvider\n"
        "metadata: {name: vllm}\n"
        "spec:\n"
        "  gridNetworkRef: grid-demo\n"
        "  backendKind: local\n"
        "  providerKind: self_hosted\n"
        "  models: [{name: m1}]\n",
        encoding="utf-8",
    )
    store = await SqliteStore.open(path, watch_poll_interval_s=0.02)
    try:
        async with contextlib.aclosing(store.watch("InferenceProvider")) as events:
            waiter = asyncio.ensure_future(anext(events))
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                "from grid.cli.store_cmd import apply_command; apply_command()",
                "-f",
                str(manifest),
                "--store",
                f"sqlite:{path}",
                stdout=asyncio.subprocess.PIPE,
            )
            out, _ = await proc.communicate()
            assert proc.returncode == 0
            assert out.decode().strip() == "inferenceprovider.grid.praxis-proxy.io/vllm created"
            event = await asyncio.wait_for(waiter, 5.0)
        assert (event.type, event.object["metadata"]["name"]) == (EventType.ADDED, "vllm")
    finally:
        await store.close()
