"""Operator start-up: one GridNetwork, a gossip mode, and a 32-byte SWIM key."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grid.adapters.store.sqlite import SqliteStore
from grid.core.resources import GridNetwork
from grid.operator.startup import StartupError, select_network
from grid.operator.swim_keys import SwimKeys
from grid.testing.store import InMemoryStore


def _network(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "GridNetwork",
        "metadata": {"name": name},
        "spec": spec,
    }


async def test_refuses_an_empty_store() -> None:
    with pytest.raises(StartupError, match="no GridNetwork"):
        await select_network(InMemoryStore(), None)


async def test_refuses_more_than_one_network_even_when_one_is_named() -> None:
    store = InMemoryStore()
    await store.create(_network("a"))
    await store.create(_network("b"))
    for wanted in (None, "a"):
        with pytest.raises(StartupError, match="one operator serves one GridNetwork"):
            await select_network(store, wanted)


async def test_selects_a_poll_network_and_reads_its_mode() -> None:
    store = InMemoryStore()
    await store.create(_network("a", signalTransport={"mode": "poll"}))
    assert (await select_network(store, None)).spec.signal_mode == "poll"


async def test_selects_the_single_gossip_network() -> None:
    store = InMemoryStore()
    await store.create(_network("a"))
    assert (await select_network(store, None)).name == "a"
    with pytest.raises(StartupError, match="'b' is not in the store"):
        await select_network(store, "b")


def _keyed_network(store_key: str = "swim.key") -> GridNetwork:
    ref = {"name": "swim", "namespace": "grid-system", "key": store_key}
    return GridNetwork.model_validate(_network("a", tls={"swimKeyRef": ref}))


async def swim_key(store: InMemoryStore, network: GridNetwork, key_file: Path | None) -> bytes:
    """The primary key the operator starts with."""
    return (await SwimKeys(store, key_file).load(network)).primary


async def _store_with_key(raw: bytes) -> InMemoryStore:
    store = InMemoryStore()
    await store.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "swim", "namespace": "grid-system"},
            "data": {"swim.key": base64.b64encode(raw).decode()},
        }
    )
    return store


async def test_swim_key_comes_from_the_referenced_secret() -> None:
    key = bytes(range(32))
    assert await swim_key(await _store_with_key(key), _keyed_network(), None) == key


async def test_swim_key_of_the_wrong_length_is_refused_without_echoing_it() -> None:
    store = await _store_with_key(b"short-secret-key")
    with pytest.raises(StartupError) as err:
        await swim_key(store, _keyed_network(), None)
    assert "short-secret-key" not in str(err.value)


async def test_swim_key_falls_back_to_the_key_file(tmp_path: Path) -> None:
    path = tmp_path / "swim.key"
    path.write_bytes(b"k" * 32)
    assert await swim_key(InMemoryStore(), _keyed_network(), path) == b"k" * 32
    with pytest.raises(StartupError, match="no SWIM key"):
        await swim_key(InMemoryStore(), _keyed_network(), None)


def test_operator_process_refuses_two_networks_with_a_clear_message(tmp_path: Path) -> None:
    db = tmp_path / "store.db"

    async def fill() -> None:
        store = await SqliteStore.open(db)
        await store.create(_network("a"))
        await store.create(_network("b"))
        await store.close()

    asyncio.run(fill())
    result = subprocess.run(
        [sys.executable, "-m", "grid", "operator", "--site", "east", "--store", f"sqlite:{db}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "one operator serves one GridNetwork" in result.stderr
    assert "Traceback" not in result.stderr


def test_new_grid_ids_are_uuid7_and_sort_by_creation_time() -> None:
    import time
    import uuid

    from grid.operator.startup import new_grid_id

    first = new_grid_id()
    deadline = time.monotonic() + 1
    second = new_grid_id()
    while second[:13] == first[:13] and time.monotonic() < deadline:
        second = new_grid_id()
    assert uuid.UUID(first).version == 7
    assert first < second
