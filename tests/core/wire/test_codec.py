"""The SWIM codec: round trips, the datagram budget, and refusals with stable codes."""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.swim.messages import (
    Ack,
    Alive,
    BroadcastItem,
    Datagram,
    Dead,
    Gossip,
    Lane,
    Nack,
    Ping,
    PingReq,
    PushPull,
    Suspect,
)
from grid.core.wire.codec import (
    CodecError,
    CodecLimits,
    DatagramTooLarge,
    StreamDeframer,
    decode_datagram,
    decode_stream,
    encode_datagram,
    encode_stream,
    encoded_size,
    pack_datagram,
    prefix_length,
)
from grid.proto_gen.grid.swim.v1 import swim_pb2 as pb

name = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
address = st.text(max_size=21)
u64 = st.integers(0, 2**64 - 1)
update_st = st.one_of(
    st.builds(Alive, member=name, address=address, incarnation=u64),
    st.builds(Suspect, member=name, address=address, incarnation=u64, accuser=name),
    st.builds(Dead, member=name, address=address, incarnation=u64, accuser=name),
)
item_st = st.builds(
    BroadcastItem,
    lane=st.sampled_from(list(Lane)),
    origin=name,
    revision=u64,
    payload=st.binary(max_size=40),
    signature=st.binary(max_size=72),
)
updates = st.lists(update_st, max_size=4).map(tuple)
items = st.lists(item_st, max_size=3).map(tuple)
datagram_st = st.one_of(
    st.builds(Ping, seq=u64, source=name, target=st.none() | name, updates=updates, items=items),
    st.builds(
        PingReq,
        seq=u64,
        source=name,
        target=name,
        target_address=address,
        updates=updates,
        items=items,
    ),
    st.builds(Ack, seq=u64, source=name, updates=updates, items=items),
    st.builds(Nack, seq=u64, source=name, updates=updates, items=items),
    st.builds(Gossip, source=name, updates=updates, items=items),
)
push_pull_st = st.builds(
    PushPull,
    source=name,
    members=st.lists(update_st, max_size=8).map(tuple),
    items=st.lists(item_st, max_size=8).map(tuple),
    join=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(datagram_st)
def test_datagram_round_trips(msg: Datagram) -> None:
    data = encode_datagram(msg)
    assert decode_datagram(data) == msg
    assert encode_datagram(decode_datagram(data)) == data


@settings(max_examples=150, deadline=None)
@given(push_pull_st)
def test_push_pull_round_trips(msg: PushPull) -> None:
    assert decode_stream(encode_stream(msg)) == msg


def test_lane_and_member_types_survive_decoding() -> None:
    msg = Ack(
        seq=1,
        source="east",
        updates=(Dead("west", "10.0.0.2:7946", 4, "west"),),
        items=(BroadcastItem(Lane.CERT, "west", 2, b"p"),),
    )
    out = decode_datagram(encode_datagram(msg))
    assert isinstance(out, Ack)
    assert isinstance(out.updates[0], Dead) and out.updates[0].left
    assert out.items[0].lane is Lane.CERT


def _bulky(count: int) -> Ping:
    upd = tuple(Alive(f"member-{i:03d}", f"10.0.{i}.1:7946", i) for i in range(count))
    its = tuple(BroadcastItem(Lane.STATE, f"o{i}", i, b"x" * 100) for i in range(count))
    return Ping(seq=7, source="east", target="west", updates=upd, items=its)


def test_oversized_datagram_is_refused_by_the_encoder() -> None:
    with pytest.raises(DatagramTooLarge):
        encode_datagram(_bulky(40))


def test_pack_datagram_fits_a_prefix_of_updates_then_items() -> None:
    msg = _bulky(20)
    data, n_updates, n_items = pack_datagram(msg)
    assert len(data) <= 1400
    out = decode_datagram(data)
    assert out.updates == msg.updates[:n_updates]
    assert out.items == msg.items[:n_items]
    assert n_updates == 20 and 0 < n_items < 20
    small = Ack(seq=1, source="east", updates=msg.updates[:2], items=msg.items[:2])
    assert pack_datagram(small) == (encode_datagram(small), 2, 2)


def _code(decode: object, data: bytes, limits: CodecLimits | None = None) -> str:
    with pytest.raises(CodecError) as info:
        if limits is None:
            decode(data)  # type: ignore[operator]
        else:
            decode(data, limits)  # type: ignore[operator]
    return info.value.code


def test_refusals_carry_stable_codes() -> None:
    assert _code(decode_datagram, b"\x0a\x05\x08") == "swim_malformed"
    assert _code(decode_datagram, b"") == "swim_unknown_message"
    assert _code(decode_datagram, bytes(1401)) == "datagram_too_large"
    no_source = pb.Datagram(ack=pb.Ack(seq=1)).SerializeToString()
    assert _code(decode_datagram, no_source) == "swim_invalid_field"
    bad_lane = pb.Datagram(
        ack=pb.Ack(seq=1, source="a"), items=[pb.BroadcastItem(lane=9, origin="o")]
    ).SerializeToString()
    assert _code(decode_datagram, bad_lane) == "swim_unknown_lane"
    no_update = pb.Datagram(
        ack=pb.Ack(seq=1, source="a"), updates=[pb.MemberUpdate()]
    ).SerializeToString()
    assert _code(decode_datagram, no_update) == "swim_unknown_update"
    long_name = pb.Datagram(ack=pb.Ack(seq=1, source="a" * 254)).SerializeToString()
    assert _code(decode_datagram, long_name) == "swim_field_too_long"
    assert _code(decode_stream, b"") == "swim_unknown_message"


def test_member_list_is_bounded() -> None:
    msg = PushPull("east", tuple(Alive(f"m{i}", "a:1", 1) for i in range(5)), ())
    assert _code(decode_stream, encode_stream(msg), CodecLimits(members_max=4)) == (
        "swim_limit_exceeded"
    )


def test_stream_deframer_splits_chunks_and_bounds_lengths() -> None:
    stream = prefix_length(b"first") + prefix_length(b"") + prefix_length(b"third")
    deframer = StreamDeframer()
    frames: list[bytes] = []
    for i in range(len(stream)):
        frames += deframer.feed(stream[i : i + 1])
    assert frames == [b"first", b"", b"third"]
    assert deframer.pending_bytes == 0
    with pytest.raises(CodecError) as info:
        StreamDeframer(frame_bytes_max=10).feed((11).to_bytes(4, "big"))
    assert info.value.code == "stream_frame_too_large"


def test_encoded_size_is_exact_for_messages_and_parts() -> None:
    item = BroadcastItem(Lane.GATEWAY, "site-a", 300, b"x" * 700)
    parts = (
        Alive("a", "127.0.0.1:7946", 1),
        Suspect("bb", "10.1.2.3:7946", 2**40, "cc"),
        Dead("ddd", "[::1]:7946", 0, "ddd"),
    )
    for bare in (
        Ping(2**31, "s", None),
        Ping(1, "s", "t"),
        PingReq(5, "s", "t", "h:1"),
        Nack(3, "n"),
        Gossip("g"),
    ):
        full = dataclasses.replace(bare, updates=parts, items=(item,))
        predicted = encoded_size(bare) + sum(encoded_size(p) for p in parts) + encoded_size(item)
        assert predicted == len(encode_datagram(full))


def test_encoded_size_of_an_item_too_big_for_any_datagram_is_exact() -> None:
    item = BroadcastItem(Lane.STATE, "site-a", 2**33, os.urandom(200_000))
    carrier = Ack(1, "site-a", items=(item,))
    unbounded = CodecLimits(datagram_bytes_max=10**7)
    assert encoded_size(Ack(1, "site-a")) + encoded_size(item) == len(
        encode_datagram(carrier, unbounded)
    )
