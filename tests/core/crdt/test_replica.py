"""GridState: applying received lane items into the local replica."""

from __future__ import annotations

from grid.core.crdt import (
    CertLaneValue,
    GatewayLaneValue,
    GridStateSnapshot,
    Lane,
    ProviderRecord,
)
from grid.core.crdt.payload import encode_lane
from grid.core.crdt.replica import GridState, MergeOutcome
from grid.core.swim.messages import BroadcastItem
from grid.proto_gen.grid.swim.v1 import state_pb2 as pb


def _rec(site: str = "west") -> ProviderRecord:
    return ProviderRecord(name="p", cluster="p", site=site, backend_kind="local", models=("m",))


def _west_items() -> tuple[GridState, list[BroadcastItem]]:
    west = GridState("west")
    items = west.update_local(west.local.put_provider("p", _rec()).add_spend("t", 4))
    items += west.update_local(west.local.set_lane(Lane.GATEWAY, GatewayLaneValue("w:443")))
    return west, items


def test_update_local_emits_items_only_for_lanes_that_moved() -> None:
    west = GridState("west")
    items = west.update_local(west.local.put_provider("p", _rec()))
    assert [(i.lane, i.revision) for i in items] == [(Lane.STATE, 1)]


def test_received_items_are_applied_once_then_unchanged() -> None:
    _, items = _west_items()
    east = GridState("east")
    assert [east.apply(i) for i in items] == [MergeOutcome.APPLIED] * 2
    assert [east.apply(i) for i in items] == [MergeOutcome.UNCHANGED] * 2
    assert [origin for origin, _, _ in east.providers()] == ["west"]
    assert east.spend("t").value == 4
    snap = east.snapshot("west")
    assert snap is not None and snap.gateway.egress_address == "w:443"


def test_older_revision_is_stale() -> None:
    west, first = _west_items()
    west.update_local(west.local.put_provider("p", _rec()))
    east = GridState("east")
    east.apply(west.item("west", Lane.STATE))
    assert east.apply(first[0]) == MergeOutcome.STALE


def test_cert_with_private_key_is_discarded_counted_and_not_stored() -> None:
    east = GridState("east")
    payload = pb.CertLane(pem="-----BEGIN PRIVATE KEY-----\nk\n").SerializeToString()
    outcome = east.apply(BroadcastItem(Lane.CERT, "west", 3, payload))
    assert outcome == MergeOutcome.DISCARDED
    assert east.counters.private_key_discards == 1
    assert east.snapshot("west") is None


def test_public_cert_is_stored() -> None:
    east = GridState("east")
    payload = encode_lane(CertLaneValue("-----BEGIN CERTIFICATE-----\nc\n"))
    assert east.apply(BroadcastItem(Lane.CERT, "west", 1, payload)) == MergeOutcome.APPLIED


def test_peer_copy_of_our_lane_from_a_previous_life_is_refuted() -> None:
    old = GridState("east")
    old.update_local(old.local.add_spend("t", 10).add_capability("models", "m"))
    old.update_local(old.local.set_lane(Lane.GATEWAY, GatewayLaneValue("old:1")))
    restarted = GridState("east")
    restarted.update_local(restarted.local.set_lane(Lane.GATEWAY, GatewayLaneValue("new:1")))
    assert restarted.apply(old.item("east", Lane.STATE)) == MergeOutcome.REASSERTED
    assert restarted.apply(old.item("east", Lane.GATEWAY)) == MergeOutcome.REASSERTED
    assert restarted.local.gateway.egress_address == "new:1"
    assert restarted.local.revision(Lane.GATEWAY) == 2
    # The counter learned from the peer keeps growing from where it was.
    restarted.update_local(restarted.local.add_spend("t", 1))
    assert restarted.spend("t").value == 11
    # Our own echo at our revision is not a conflict.
    assert restarted.apply(restarted.item("east", Lane.GATEWAY)) == MergeOutcome.UNCHANGED


def test_items_cover_every_written_lane_of_every_origin() -> None:
    _, items = _west_items()
    east = GridState("east")
    for item in items:
        east.apply(item)
    assert {(i.origin, i.lane) for i in east.items()} == {
        ("west", Lane.STATE),
        ("west", Lane.GATEWAY),
    }


def test_capabilities_union_across_origins() -> None:
    a = GridState("a")
    a.update_local(a.local.add_capability("models", "x"))
    b = GridState("b")
    b.update_local(b.local.add_capability("models", "y"))
    b.apply(a.item("a", Lane.STATE))
    assert b.capabilities("models") == {"x", "y"}
    assert GridStateSnapshot.empty("a").state.capability("models").elements == frozenset()


def test_refuting_a_maximal_revision_stays_in_the_wire_range() -> None:
    east = GridState("east")
    east.update_local(east.local.set_lane(Lane.GATEWAY, GatewayLaneValue("mine:1")))
    forged = BroadcastItem(Lane.GATEWAY, "east", 2**64 - 1, encode_lane(GatewayLaneValue("x:1")))
    assert east.apply(forged) == MergeOutcome.REASSERTED
    assert east.local.revision(Lane.GATEWAY) == 2**64 - 1
    assert east.item("east", Lane.GATEWAY).revision == 2**64 - 1
