"""The replica ↔ SWIM glue: local writes publish moved lanes; a reassert re-publishes ours."""

from __future__ import annotations

import random

from grid.core.crdt import GatewayLaneValue, GridStateSnapshot, Lane, ProviderRecord, sync
from grid.core.crdt.payload import encode_lane
from grid.core.crdt.replica import GridState
from grid.core.swim.effects import Deliver
from grid.core.swim.machine import SwimMachine
from grid.core.swim.messages import BroadcastItem, Gossip
from grid.core.wire.codec import encoded_size


def _rec() -> ProviderRecord:
    return ProviderRecord(name="p", cluster="p", site="east", backend_kind="local", models=("m",))


def _joined(node_id: str) -> SwimMachine:
    machine = SwimMachine(node_id, f"{node_id}:7946", rng=random.Random(1), size_of=encoded_size)
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


def test_admission_merges_a_peers_item_and_the_machine_holds_it() -> None:
    west = GridState("west")
    item = west.update_local(west.local.add_spend("t", 3))[0]
    east = GridState("east")
    machine = SwimMachine(
        "east", "east:7946", rng=random.Random(1), size_of=encoded_size, admit=sync.admission(east)
    )
    machine.join([], 0.0)
    effects = machine.handle_packet("west:7946", Gossip("west", items=(item,)), 1.0)
    assert [e.item for e in effects if isinstance(e, Deliver)] == [item]
    assert east.spend("t").value == 3
    assert machine.known_items() == [item]


def test_admission_republishes_our_lane_past_a_reasserted_revision() -> None:
    replica = GridState("east")
    machine = SwimMachine(
        "east",
        "east:7946",
        rng=random.Random(1),
        size_of=encoded_size,
        admit=sync.admission(replica),
    )
    machine.join([], 0.0)
    sync.publish_snapshot(replica, machine, _write(replica), 1.0)
    # A peer still holds our gateway lane from before a restart, at revision 5.
    echoed = BroadcastItem(Lane.GATEWAY, "east", 5, encode_lane(GatewayLaneValue("old:1")))
    effects = machine.handle_packet("west:7946", Gossip("west", items=(echoed,)), 2.0)
    assert not [e for e in effects if isinstance(e, Deliver)]
    ours = {(i.lane, i.origin): i for i in machine.known_items()}[(Lane.GATEWAY, "east")]
    assert ours.revision == 6
    assert ours.payload == encode_lane(GatewayLaneValue("e:1"))
    assert replica.local.revision(Lane.GATEWAY) == 6


def test_an_undecodable_item_is_counted_and_never_held() -> None:
    replica = GridState("east")
    machine = SwimMachine(
        "east",
        "east:7946",
        rng=random.Random(1),
        size_of=encoded_size,
        admit=sync.admission(replica),
    )
    machine.join([], 0.0)
    bad = BroadcastItem(Lane.STATE, "west", 2**62, b"\xff" * 200)
    effects = machine.handle_packet("west:7946", Gossip("west", items=(bad,)), 1.0)
    assert not [e for e in effects if isinstance(e, Deliver)]
    assert replica.snapshot("west") is None
    assert machine.known_items() == []
    assert replica.counters.dropped["payload_malformed"] == 1
    # The origin's real item, at a far lower revision, is still taken.
    west = GridState("west")
    good = west.update_local(west.local.add_spend("t", 1))[0]
    machine.handle_packet("west:7946", Gossip("west", items=(good,)), 2.0)
    assert machine.known_items() == [good] and replica.spend("t").value == 1


def test_write_local_builds_on_the_newest_snapshot() -> None:
    replica, machine = GridState("east"), _joined("east")
    count, _ = sync.write_local(
        replica, machine, lambda snap: snap.set_lane(Lane.GATEWAY, GatewayLaneValue("e:1")), 1.0
    )
    assert count == 1
    assert sync.write_local(replica, machine, lambda snap: snap, 2.0) == (0, [])
