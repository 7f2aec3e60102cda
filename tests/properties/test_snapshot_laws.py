"""Whole-snapshot laws: same-origin snapshot merges are commutative, associative
and idempotent, and every delivery order of a write history converges."""

from __future__ import annotations

from dataclasses import replace
from functools import reduce

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.crdt import (
    CertLaneValue,
    GatewayLaneValue,
    GridStateSnapshot,
    Lane,
    MetadataLaneValue,
    ProviderRecord,
    RecordSignals,
)
from grid.core.crdt.payload import decode_lane, decode_snapshot, encode_lane, encode_snapshot
from grid.core.crdt.replica import GridState
from grid.core.swim.messages import BroadcastItem

ORIGIN = "east"

ratio = st.none() | st.floats(min_value=0, max_value=1, allow_nan=False)
signals_st = st.builds(
    RecordSignals,
    queue_depth=ratio,
    kv_cache_utilization=ratio,
    prefix_cache_hit_ratio=ratio,
    p99_latency_ms=st.none() | st.floats(min_value=0, max_value=1e6, allow_nan=False),
    cost_per_million_input_tokens=st.none() | st.floats(0, 1e3, allow_nan=False),
)
record_st = st.builds(
    ProviderRecord,
    name=st.sampled_from(("vllm-a", "vllm-b")),
    cluster=st.just("c"),
    site=st.just(ORIGIN),
    backend_kind=st.sampled_from(("local", "remote", "cloud_managed", "api_provider")),
    models=st.lists(st.sampled_from(("llama", "qwen")), max_size=2).map(tuple),
    healthy=st.none() | st.booleans(),
    observed_at=st.floats(min_value=0, max_value=2e9, allow_nan=False),
    signals=signals_st,
    phase=st.sampled_from(("Pending", "Available", "Degraded", "Unavailable")),
)
lane_value_st = st.one_of(
    st.builds(
        lambda a: (Lane.GATEWAY, GatewayLaneValue(egress_address=a)),
        st.sampled_from(("10.0.0.1:7946", "10.0.0.2:7946")),
    ),
    st.builds(
        lambda r: (Lane.METADATA, MetadataLaneValue(region=r)), st.sampled_from(("eu", "us"))
    ),
    st.builds(
        lambda p: (Lane.CERT, CertLaneValue(pem=p)), st.sampled_from(("", "CERT-A", "CERT-B"))
    ),
)
op_st = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(("p1", "p2")), record_st),
    st.tuples(st.just("remove"), st.sampled_from(("p1", "p2")), st.none()),
    st.tuples(
        st.sampled_from(("cap_add", "cap_remove")),
        st.sampled_from(("models", "tools", "agents")),
        st.sampled_from(("llama", "qwen")),
    ),
    st.tuples(st.just("spend"), st.sampled_from(("t1", "t2")), st.integers(0, 20)),
    st.tuples(st.just("lane"), st.none(), lane_value_st),
)


def _apply(snap: GridStateSnapshot, op: tuple[str, object, object]) -> GridStateSnapshot:
    kind, a, b = op
    if kind == "put":
        assert isinstance(a, str) and isinstance(b, ProviderRecord)
        return snap.put_provider(a, b)
    if kind == "remove":
        assert isinstance(a, str)
        return snap.remove_provider(a)
    if kind in ("cap_add", "cap_remove"):
        assert isinstance(a, str) and isinstance(b, str)
        if kind == "cap_add":
            return snap.add_capability(a, b)
        return snap.remove_capability(a, b)
    if kind == "spend":
        assert isinstance(a, str) and isinstance(b, int)
        return snap.add_spend(a, b)
    assert isinstance(b, tuple)
    lane, value = b
    return snap.set_lane(lane, value)


@st.composite
def snapshot_history(draw: st.DrawFn) -> list[GridStateSnapshot]:
    """Every snapshot a writer (possibly restarted from a fork) produced."""
    forks = draw(st.lists(st.integers(0, 3), min_size=1, max_size=2))
    produced: list[GridStateSnapshot] = []
    for base in forks:
        snap = GridStateSnapshot.empty(ORIGIN, base_revision=base)
        for op in draw(st.lists(op_st, max_size=8)):
            snap = _apply(snap, op)
            produced.append(snap)
    return produced or [GridStateSnapshot.empty(ORIGIN)]


snapshot_st = snapshot_history().map(lambda h: h[-1])


@settings(max_examples=60, deadline=None)
@given(snapshot_st, snapshot_st, snapshot_st)
def test_snapshot_merge_laws(
    a: GridStateSnapshot, b: GridStateSnapshot, c: GridStateSnapshot
) -> None:
    assert a.merge(b) == b.merge(a)
    assert a.merge(b).merge(c) == a.merge(b.merge(c))
    assert a.merge(a) == a
    assert a.merge(b).merge(b) == a.merge(b)


@settings(max_examples=60, deadline=None)
@given(snapshot_history(), st.data())
def test_snapshot_any_delivery_order_with_duplicates_converges(
    history: list[GridStateSnapshot], data: st.DataObject
) -> None:
    expected = reduce(lambda x, y: x.merge(y), history)
    dupes = data.draw(st.lists(st.sampled_from(history), max_size=6))
    delivery = data.draw(st.permutations(history + dupes))
    assert reduce(lambda x, y: x.merge(y), delivery) == expected


@settings(max_examples=60, deadline=None)
@given(snapshot_st)
def test_snapshot_and_lane_codecs_round_trip(snap: GridStateSnapshot) -> None:
    data = encode_snapshot(snap)
    assert decode_snapshot(data) == snap
    assert encode_snapshot(decode_snapshot(data)) == data
    for lane in Lane:
        value = snap.lane_value(lane)
        assert decode_lane(lane, encode_lane(value), ORIGIN) == value


@st.composite
def item_history(draw: st.DrawFn) -> tuple[list[BroadcastItem], dict[str, GridStateSnapshot]]:
    """Every item published by two origins writing their own snapshots, and their finals."""
    items: list[BroadcastItem] = []
    finals: dict[str, GridStateSnapshot] = {}
    for origin in ("east", "west"):
        writer = GridState(origin)
        for op in draw(st.lists(op_st, max_size=6)):
            if op[0] == "put":
                record = op[2]
                assert isinstance(record, ProviderRecord)
                op = ("put", op[1], replace(record, site=origin))
            items.extend(writer.update_local(_apply(writer.local, op)))
        if writer.items():
            finals[origin] = writer.local
    return items, finals


@settings(max_examples=60, deadline=None)
@given(item_history(), st.data())
def test_replicas_converge_for_any_item_delivery_order_with_duplicates(
    history: tuple[list[BroadcastItem], dict[str, GridStateSnapshot]], data: st.DataObject
) -> None:
    items, finals = history
    replicas = []
    for _ in range(2):
        dupes = data.draw(st.lists(st.sampled_from(items), max_size=5)) if items else []
        replica = GridState("north")
        for item in data.draw(st.permutations(items + dupes)):
            replica.apply(item)
        replicas.append(replica)
    a, b = replicas
    assert a.origins() == sorted({"north", *finals})
    for origin, final in finals.items():
        assert a.snapshot(origin) == final
    assert a.origins() == b.origins()
    for origin in a.origins():
        assert a.snapshot(origin) == b.snapshot(origin)
    assert {(i.origin, i.lane, i.revision) for i in a.items()} == {
        (i.origin, i.lane, i.revision) for i in b.items()
    }
