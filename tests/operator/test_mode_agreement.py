"""Mode agreement: each site gossips its signal transport mode in its metadata lane; a
site that sees a peer in another mode says so on the GridNetwork, in a metric and in
the live view."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from grid.core.crdt import Lane, MetadataLaneValue
from grid.core.crdt.payload import decode_lane, encode_lane
from grid.core.crdt.replica import GridState
from grid.core.live.view import SiteInputs, merge_views, site_view
from grid.core.resources import API_VERSION, GridNetwork
from grid.core.resources.network_status import (
    MISMATCH_CONDITION,
    RoundOutcome,
    mismatched,
    rendered_patch,
)
from grid.operator.lifecycle import SignalLifecycle
from grid.operator.settings import OperatorSettings
from grid.proto_gen.grid.swim.v1 import state_pb2 as pb
from grid.testing.store import InMemoryStore

NOW = "2026-01-01T00:00:00Z"


@pytest.mark.parametrize("mode", ["gossip", "poll"])
def test_the_mode_travels_in_the_metadata_lane(mode: str) -> None:
    value = MetadataLaneValue("eu", "eu-1", "", (("tier", "a"),), signal_transport=mode)
    assert decode_lane(Lane.METADATA, encode_lane(value), "east") == value


def test_a_peer_without_the_field_or_with_an_unknown_mode_reads_as_unknown() -> None:
    older = pb.MetadataLane(region="eu").SerializeToString()  # a peer that predates it
    assert decode_lane(Lane.METADATA, older, "west").signal_transport == ""  # type: ignore[union-attr]
    odd = pb.MetadataLane(signal_transport="carrier-pigeon").SerializeToString()
    assert decode_lane(Lane.METADATA, odd, "west").signal_transport == ""  # type: ignore[union-attr]


def test_only_a_known_other_mode_is_a_mismatch() -> None:
    peers = {"west": "poll", "central": "gossip", "old": ""}
    assert mismatched("gossip", peers) == (("west", "poll"),)
    assert mismatched("poll", peers) == (("central", "gossip"),)
    assert mismatched("gossip", {"central": "gossip", "old": ""}) == ()


def _network(conditions: list[dict[str, str]] | None = None) -> GridNetwork:
    doc = {
        "apiVersion": API_VERSION,
        "kind": "GridNetwork",
        "metadata": {"name": "net", "generation": 1},
        "spec": {},
        "status": {"phase": "Active", "conditions": conditions or []},
    }
    return GridNetwork.model_validate(doc)


def _mismatch(network: GridNetwork, outcome: RoundOutcome) -> dict[str, str] | None:
    patch = rendered_patch(network, [], {}, outcome, NOW)
    conditions = patch.get("conditions") or [
        c.model_dump(by_alias=True) for c in (network.status.conditions if network.status else [])
    ]
    return next((c for c in conditions if c["type"] == MISMATCH_CONDITION), None)


def test_the_condition_is_written_on_a_mismatch_and_cleared_once_the_modes_agree() -> None:
    mixed = RoundOutcome(served=1, own_mode="gossip", mode_mismatch=(("west", "poll"),))
    condition = _mismatch(_network(), mixed)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "PeerModeDiffers")
    assert "west (poll)" in condition["message"]
    agreed = RoundOutcome(served=1, own_mode="gossip")
    cleared = _mismatch(_network([condition]), agreed)
    assert cleared is not None and (cleared["status"], cleared["reason"]) == ("False", "ModesAgree")


def test_a_mesh_that_always_agreed_carries_no_mismatch_condition() -> None:
    assert _mismatch(_network(), RoundOutcome(served=1, own_mode="gossip")) is None


def _replica_with_peers(modes: dict[str, str]) -> GridState:
    east = GridState("east")
    for site, mode in modes.items():
        peer = GridState(site)
        lane = MetadataLaneValue(signal_transport=mode)
        peer.update_local(peer.local.set_lane(Lane.METADATA, lane))
        for item in peer.items():
            east.apply(item)
    return east


async def test_the_lifecycle_counts_peers_in_another_mode(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    settings = OperatorSettings(site="east", store="memory:", overlay_dir=tmp_path)
    lifecycle = SignalLifecycle(settings, InMemoryStore(), registry)
    network = _network()
    await lifecycle.fix(network, 1)  # gossip: the GridNetwork's default mode
    replica = _replica_with_peers({"west": "poll", "central": "gossip"})
    assert lifecycle.mode_mismatch(replica) == (("west", "poll"),)
    assert registry.get_sample_value("grid_signal_transport_mismatched_peers") == 1
    agreed = _replica_with_peers({"west": "gossip"})
    assert lifecycle.mode_mismatch(agreed) == ()
    assert registry.get_sample_value("grid_signal_transport_mismatched_peers") == 0


def test_the_live_view_shows_each_sites_mode_and_its_mismatched_peers() -> None:
    east = site_view(SiteInputs("east", NOW, 1, mode="gossip", mismatched=(("west", "poll"),)))
    west = site_view(SiteInputs("west", NOW, 1, mode="poll", mismatched=(("east", "gossip"),)))
    assert east["modes"] == {
        "east": {"mode": "gossip", "mismatched": [{"site": "west", "mode": "poll"}]}
    }
    merged = merge_views([east, west], NOW)
    assert merged["modes"]["west"] == {
        "mode": "poll",
        "mismatched": [{"site": "east", "mode": "gossip"}],
    }
