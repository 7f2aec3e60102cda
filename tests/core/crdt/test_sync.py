"""The replica ↔ SWIM glue: local writes publish moved lanes; a reassert re-publishes ours."""

from __future__ import annotations

import random

import pytest

from grid.core.crdt import GatewayLaneValue, GridStateSnapshot, Lane, ProviderRecord, sync
from grid.core.crdt.payload import encode_lane
from grid.core.crdt.replica import GridState, MergeOutcome
from grid.core.swim.machine import SwimMachine
from grid.core.swim.messages import BroadcastItem
from grid.errors import ProtocolError


def _rec() -> ProviderRecord:
    return ProviderRecord(name="p", cluster="p", site="east", backend_kind="local", models=("m",))


def _joined(node_id: str) -> SwimMachine:
    machine = SwimMachine(node_id, f"{node_id}:7946", rng=random.Random(1))
    machine.join([], 0.0)
    return machine


def _write(replica: GridState) -> GridStateSnapshot:
    return replica.local.put_provider("p", _rec()).set_lane(Lane.GATEWAY, GatewayLaneValue("e:1"))


def test_publish_snapshot_publishes_exactly_the_lanes_that_moved() -> None:
    replica, machine = GridState("east"), _joined("east")
    count, _ = sync.publish_snapshot(replica, machine, _write(replica), 1.0)
    assert count == 2
    held = {(i.lane, i.revision) for i in machine.known_items()}
    assert held == {(Lane.STATE, 1), (Lane.GATEWAY, 1)}
    assert {i.payload for i in machine.known_items()} == {
        replica.item("east", Lane.STATE).payload,
        replica.item("east", Lane.GATEWAY).payload,
    }
    count, effects = sync.publish_snapshot(replica, machine, replica.local, 2.0)
    assert (count, effects) == (0, [])


def test_merge_delivered_applies_a_peers_item_without_effects() -> None:
    west = GridState("west")
    item = west.update_local(west.local.add_spend("t", 3))[0]
    east, machine = GridState("east"), _joined("east")
    outcome, effects = sync.merge_delivered(east, machine, item, 1.0)
    assert (outcome, effects) == (MergeOutcome.APPLIED, [])
    assert east.spend("t").value == 3
    assert machine.known_items() == []


def test_merge_delivered_republishes_our_lane_past_a_reasserted_revision() -> None:
    replica, machine = GridState("east"), _joined("east")
    sync.publish_snapshot(replica, machine, _write(replica), 1.0)
    # A peer still holds our gateway lane from before a restart, at revision 5.
    echoed = BroadcastItem(Lane.GATEWAY, "east", 5, encode_lane(GatewayLaneValue("old:1")))
    outcome, _ = sync.merge_delivered(replica, machine, echoed, 2.0)
    assert outcome is MergeOutcome.REASSERTED
    ours = {(i.lane, i.origin): i for i in machine.known_items()}[(Lane.GATEWAY, "east")]
    assert ours.revision == 6
    assert ours.payload == encode_lane(GatewayLaneValue("e:1"))
    assert replica.local.revision(Lane.GATEWAY) == 6


def test_merge_delivered_raises_on_an_undecodable_payload() -> None:
    replica, machine = GridState("east"), _joined("east")
    with pytest.raises(ProtocolError):
        sync.merge_delivered(replica, machine, BroadcastItem(Lane.STATE, "west", 1, b"\xff"), 1.0)
    assert replica.snapshot("west") is None
