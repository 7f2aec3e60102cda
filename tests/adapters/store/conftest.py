"""Fixtures for the ResourceStore contract suite: every test runs against both stores."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from grid.adapters.store.port import ResourceStore
from grid.adapters.store.sqlite import SqliteStore
from grid.testing.store import InMemoryStore

StoreFactory = Callable[..., Awaitable[ResourceStore]]


@pytest.fixture(params=["sqlite", "memory"])
async def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StoreFactory]:
    """Opens stores of the parametrized implementation and closes them afterwards."""
    opened: list[ResourceStore] = []

    async def make(**options: Any) -> ResourceStore:
        store: ResourceStore
        if request.param == "sqlite":
            store = await SqliteStore.open(
                tmp_path / "store.db", watch_poll_interval_s=0.05, **options
            )
        else:
            store = InMemoryStore(**options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


@pytest.fixture
async def store(store_factory: StoreFactory) -> ResourceStore:
    """One store of the parametrized implementation."""
    return await store_factory()
