"""The served GridNetwork: start-up status, gridId convergence and restarts on change."""

from __future__ import annotations

from typing import Any

import pytest

from grid.adapters.store.port import EventType
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import Lane, MetadataLaneValue
from grid.core.resources import API_VERSION, GridNetwork
from grid.core.routing.mesh_view import GRID_ID_LABEL
from grid.operator.network import ServedNetwork
from grid.operator.startup import StartupError

OLDER = "0190a000-0000-7000-8000-000000000001"


def _doc(name: str = "net", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GridNetwork",
        "metadata": {"name": name},
        "spec": spec,
    }


async def _served(store: Any, **spec: Any) -> ServedNetwork:
    network = GridNetwork.model_validate(await store.create(_doc(**spec)))
    served = ServedNetwork(store, "east")
    await served.initialize(network)
    return served


def _replica_hearing(grid_id: str) -> GridState:
    """East's replica, holding west's metadata lane that gossips ``grid_id``."""
    west = GridState("west")
    labels = ((GRID_ID_LABEL, grid_id),)
    west.update_local(west.local.set_lane(Lane.METADATA, MetadataLaneValue(labels=labels)))
    east = GridState("east")
    for item in west.items():
        east.apply(item)
    return east


async def test_initialize_persists_a_grid_id_once(store: Any) -> None:
    served = await _served(store)
    assert served.network is not None and served.network.status is not None
    assert served.grid_id == served.network.status.grid_id
    assert served.network.phase.value == "Initializing"
    assert store.calls["patch_status", "GridNetwork"] == 1
    again = ServedNetwork(store, "east")
    await again.initialize(GridNetwork.model_validate(await store.get("GridNetwork", "net")))
    assert again.grid_id == served.grid_id
    assert store.calls["patch_status", "GridNetwork"] == 1


async def test_the_site_adopts_an_older_gossiped_grid_id(store: Any) -> None:
    served = await _served(store)
    assert served.network is not None
    replica = _replica_hearing(OLDER)
    assert await served.converge_grid_id(served.network, replica)
    assert served.grid_id == OLDER
    stored = GridNetwork.model_validate(await store.get("GridNetwork", "net"))
    assert stored.status is not None and stored.status.grid_id == OLDER
    assert not await served.converge_grid_id(served.network, replica)


async def test_a_pinned_or_younger_grid_id_is_kept(store: Any) -> None:
    pinned = await _served(store, gridId="ffffffff-0000-7000-8000-000000000000")
    assert pinned.network is not None
    assert not await pinned.converge_grid_id(pinned.network, _replica_hearing(OLDER))
    assert pinned.grid_id.startswith("ffffffff")
    younger = "ffffffff-ffff-7fff-bfff-ffffffffffff"
    assert not await pinned.converge_grid_id(pinned.network, _replica_hearing(younger))


async def test_another_network_or_our_deletion_stops_the_operator(store: Any) -> None:
    served = await _served(store)
    served.on_event(EventType.MODIFIED, _doc(seeds=["west:7946"]))
    assert served.network is not None and served.network.spec.seeds == ["west:7946"]
    with pytest.raises(StartupError, match="second GridNetwork"):
        served.on_event(EventType.ADDED, _doc("other"))
    served.on_event(EventType.DELETED, _doc("other"))
    with pytest.raises(StartupError, match="was deleted"):
        served.on_event(EventType.DELETED, _doc())
