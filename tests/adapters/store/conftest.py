"""Fixtures for the ResourceStore contract suite: every test runs against every store.

``kubernetes`` is the Kubernetes store talking to the strict API emulator over
HTTP on 127.0.0.1; the options a test passes (the event log retention) go to the
emulator, which plays the part of the server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from grid.adapters.store.port import ResourceStore
from grid.adapters.store.sqlite import SqliteStore
from grid.testing.kube_api import KubeApiEmulator, connect_store
from grid.testing.store import InMemoryStore

StoreFactory = Callable[..., Awaitable[ResourceStore]]


@pytest.fixture(params=["sqlite", "memory", "kubernetes"])
async def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StoreFactory]:
    """Opens stores of the parametrized implementation and closes them afterwards."""
    opened: list[ResourceStore] = []
    emulator: KubeApiEmulator | None = None

    async def make(**options: Any) -> ResourceStore:
        nonlocal emulator
        store: ResourceStore
        if request.param == "sqlite":
            store = await SqliteStore.open(
                tmp_path / "store.db", watch_poll_interval_s=0.05, **options
            )
        elif request.param == "kubernetes":
            if emulator is None:
                retention = options.pop("event_log_retention", 1_000)
                emulator = KubeApiEmulator(retention=retention, bookmark_interval_s=0.05)
                await emulator.start()
            store = await connect_store(emulator, tmp_path, **options)
        else:
            store = InMemoryStore(**options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()
    if emulator is not None:
        await emulator.stop()


@pytest.fixture
async def store(store_factory: StoreFactory) -> ResourceStore:
    """One store of the parametrized implementation."""
    return await store_factory()
