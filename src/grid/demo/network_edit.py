"""Editing the demo's GridNetwork in each site's store, as an administrator would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grid.adapters.store.sqlite import SqliteStore
from grid.demo import plan as p
from grid.errors import Conflict

TRIES = 20
"""Writes tried per store: an operator writing its status meanwhile makes one conflict."""


async def set_network_spec(stores: list[Path], field: str, value: Any) -> None:
    """Set ``spec.{field}`` of the demo's GridNetwork in every one of ``stores``."""
    for path in stores:
        store = await SqliteStore.open(path)
        try:
            for _attempt in range(TRIES):
                network = await store.get("GridNetwork", p.NETWORK)
                network["spec"][field] = value
                try:
                    await store.replace(network)
                    break
                except Conflict:
                    continue
        finally:
            await store.close()
