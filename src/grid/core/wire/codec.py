"""The SWIM codec: `grid.core.swim.messages` to and from Protocol Buffers bytes.

A UDP datagram's plaintext is one ``grid.swim.v1.Datagram`` and a TCP
anti-entropy message is one ``grid.swim.v1.Stream`` (``proto/grid/swim/v1``).
Encoders write the fields in the order the message holds them, so a message
encodes to the same bytes every time.

Decoders read untrusted bytes and have exactly two outcomes: a message, or a
`CodecError` (a `grid.errors.ProtocolError`) with a stable ``code``. Input
length is checked before parsing, so nothing is allocated beyond a bounded
multiple of it, and every count and string length is then checked against
`CodecLimits`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

from google.protobuf.message import DecodeError, Message

from grid.core.swim.dissemination import WireValue
from grid.core.swim.messages import (
    Ack,
    Alive,
    BroadcastItem,
    Datagram,
    Dead,
    Gossip,
    Lane,
    MemberUpdate,
    Nack,
    Ping,
    PingReq,
    PushPull,
    Suspect,
)
from grid.core.wire.frame import OVERHEAD_BYTES
from grid.errors import GridError, ProtocolError
from grid.proto_gen.grid.swim.v1 import swim_pb2 as pb


class CodecError(ProtocolError):
    """Bytes that are not a valid SWIM message; ``code`` says why."""

    code = "swim_malformed"


class DatagramTooLarge(GridError):
    """An outgoing datagram would exceed the plaintext budget (a sender-side bug)."""


@dataclass(frozen=True, slots=True)
class CodecLimits:
    """Bounds on SWIM messages; each caps what one peer can make us allocate."""

    datagram_bytes_max: int = 1400
    """Plaintext bytes per UDP datagram (SPEC-DECISIONS §3); larger state goes by push-pull."""

    stream_bytes_max: int = 8 * 1024 * 1024
    """Plaintext bytes per push-pull message. Enough for ~1,000 members with a state lane
    each; raising it raises the memory one TCP peer can claim."""

    updates_max: int = 64
    """Member updates piggybacked on one datagram (1,400 bytes hold far fewer)."""

    items_max: int = 64
    """Broadcast items piggybacked on one datagram."""

    members_max: int = 1024
    """Members in one push-pull member table."""

    stream_items_max: int = 4096
    """Broadcast items in one push-pull message: four lanes for each of 1,024 members."""

    name_bytes_max: int = 253
    """Bytes of a member or origin name (a DNS name's maximum)."""

    address_bytes_max: int = 261
    """Bytes of a ``host:port`` address (a DNS name, a colon and five digits, bracket room)."""

    payload_bytes_max: int = 1024 * 1024
    """Bytes of one broadcast item's opaque payload."""

    signature_bytes_max: int = 128
    """Bytes of one broadcast item's origin signature: an Ed25519 signature is 64
    bytes and a DER ECDSA P-256 one at most 72; anything longer is refused."""


DEFAULT_LIMITS = CodecLimits()

LANE_TO_PB: dict[Lane, int] = {
    Lane.STATE: pb.LANE_STATE,
    Lane.GATEWAY: pb.LANE_GATEWAY,
    Lane.CERT: pb.LANE_CERT,
    Lane.METADATA: pb.LANE_METADATA,
}
PB_TO_LANE: dict[int, Lane] = {number: lane for lane, number in LANE_TO_PB.items()}


def _fail(code: str, message: str) -> CodecError:
    return CodecError(message, code=code)


# -- encoding -----------------------------------------------------------------------


def _update_pb(update: MemberUpdate) -> pb.MemberUpdate:
    msg = pb.MemberUpdate()
    match update:
        case Alive(member=member, address=address, incarnation=incarnation):
            msg.alive.CopyFrom(pb.Alive(member=member, address=address, incarnation=incarnation))
        case Suspect(member=member, address=address, incarnation=incarnation, accuser=accuser):
            msg.suspect.CopyFrom(
                pb.Suspect(member=member, address=address, incarnation=incarnation, accuser=accuser)
            )
        case Dead(member=member, address=address, incarnation=incarnation, accuser=accuser):
            msg.dead.CopyFrom(
                pb.Dead(member=member, address=address, incarnation=incarnation, accuser=accuser)
            )
        case _:
            assert_never(update)
    return msg


def _item_pb(item: BroadcastItem) -> pb.BroadcastItem:
    return pb.BroadcastItem(
        lane=LANE_TO_PB[Lane(item.lane)],  # type: ignore[arg-type]
        origin=item.origin,
        revision=item.revision,
        payload=item.payload,
        signature=item.signature,
    )


def _datagram_pb(msg: Datagram) -> pb.Datagram:
    out = pb.Datagram(
        updates=[_update_pb(u) for u in msg.updates], items=[_item_pb(i) for i in msg.items]
    )
    match msg:
        case Ping(seq=seq, source=source, target=target):
            out.ping.CopyFrom(pb.Ping(seq=seq, source=source))
            if target is not None:
                out.ping.target = target
        case PingReq(seq=seq, source=source, target=target, target_address=target_address):
            out.ping_req.CopyFrom(
                pb.PingReq(seq=seq, source=source, target=target, target_address=target_address)
            )
        case Ack(seq=seq, source=source):
            out.ack.CopyFrom(pb.Ack(seq=seq, source=source))
        case Gossip(source=source):
            out.gossip.CopyFrom(pb.Gossip(source=source))
        case Nack(seq=seq, source=source):
            out.nack.CopyFrom(pb.Nack(seq=seq, source=source))
        case _:
            assert_never(msg)
    return out


def encode_datagram(msg: Datagram, limits: CodecLimits = DEFAULT_LIMITS) -> bytes:
    """Encode one datagram; raises `DatagramTooLarge` beyond the plaintext budget."""
    data = _datagram_pb(msg).SerializeToString(deterministic=True)
    if len(data) > limits.datagram_bytes_max:
        raise DatagramTooLarge(f"datagram of {len(data)} bytes exceeds {limits.datagram_bytes_max}")
    return data


def pack_datagram(msg: Datagram, limits: CodecLimits = DEFAULT_LIMITS) -> tuple[bytes, int, int]:
    """Encode ``msg`` with as many of its updates, then items, as fit in one datagram.

    Returns the bytes and how many updates and items went in (a prefix of each,
    so the caller keeps its own priority order). Raises `DatagramTooLarge` only
    when even the bare message does not fit.
    """
    out = _datagram_pb(msg)
    del out.updates[:]
    del out.items[:]
    budget = limits.datagram_bytes_max
    if out.ByteSize() > budget:
        raise DatagramTooLarge("the bare message exceeds the datagram budget")
    updates = _append_fitting(out.updates, [_update_pb(u) for u in msg.updates], out, budget)
    items = _append_fitting(out.items, [_item_pb(i) for i in msg.items], out, budget)
    return out.SerializeToString(deterministic=True), updates, items


def _append_fitting(field: Any, parts: Sequence[Message], whole: Message, budget: int) -> int:
    count = 0
    for part in parts:
        field.add().CopyFrom(part)
        if whole.ByteSize() > budget:
            del field[-1]
            break
        count += 1
    return count


def encode_stream(msg: PushPull) -> bytes:
    """Encode one push-pull message for the TCP anti-entropy stream."""
    out = pb.Stream()
    out.push_pull.CopyFrom(
        pb.PushPull(
            source=msg.source,
            members=[_update_pb(u) for u in msg.members],
            items=[_item_pb(i) for i in msg.items],
            join=msg.join,
        )
    )
    return out.SerializeToString(deterministic=True)


# -- decoding -----------------------------------------------------------------------


def _parse(msg: Message, data: bytes, limit: int, what: str) -> None:
    if len(data) > limit:
        raise _fail(f"{what}_too_large", f"{what} of {len(data)} bytes exceeds {limit}")
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError, RecursionError) as exc:
        raise _fail("swim_malformed", f"{what} is not a valid message") from exc


def _name(value: str, what: str, limits: CodecLimits) -> str:
    if not value:
        raise _fail("swim_invalid_field", f"{what} is empty")
    if len(value.encode()) > limits.name_bytes_max:
        raise _fail("swim_field_too_long", f"{what} is longer than {limits.name_bytes_max} bytes")
    return value


def _address(value: str, what: str, limits: CodecLimits) -> str:
    if len(value.encode()) > limits.address_bytes_max:
        raise _fail(
            "swim_field_too_long", f"{what} is longer than {limits.address_bytes_max} bytes"
        )
    return value


def _count(what: str, count: int, limit: int) -> None:
    if count > limit:
        raise _fail("swim_limit_exceeded", f"{count} {what} exceed the limit of {limit}")


def _update(msg: pb.MemberUpdate, limits: CodecLimits) -> MemberUpdate:
    kind = msg.WhichOneof("update")
    if kind == "alive":
        a = msg.alive
        return Alive(
            member=_name(a.member, "member", limits),
            address=_address(a.address, "address", limits),
            incarnation=a.incarnation,
        )
    if kind in ("suspect", "dead"):
        s = msg.suspect if kind == "suspect" else msg.dead
        cls = Suspect if kind == "suspect" else Dead
        return cls(
            member=_name(s.member, "member", limits),
            address=_address(s.address, "address", limits),
            incarnation=s.incarnation,
            accuser=_name(s.accuser, "accuser", limits),
        )
    raise _fail("swim_unknown_update", "member update of an unknown type")


def _item(msg: pb.BroadcastItem, limits: CodecLimits) -> BroadcastItem:
    lane = PB_TO_LANE.get(int(msg.lane))
    if lane is None:
        raise _fail("swim_unknown_lane", "broadcast item of an unknown lane")
    if len(msg.payload) > limits.payload_bytes_max:
        raise _fail("swim_limit_exceeded", "broadcast item payload is too large")
    if len(msg.signature) > limits.signature_bytes_max:
        raise _fail("swim_limit_exceeded", "broadcast item signature is too long")
    return BroadcastItem(
        lane=lane,
        origin=_name(msg.origin, "origin", limits),
        revision=msg.revision,
        payload=bytes(msg.payload),
        signature=bytes(msg.signature),
    )


def _updates(
    updates: Iterable[pb.MemberUpdate], count: int, limit: int, what: str, limits: CodecLimits
) -> tuple[MemberUpdate, ...]:
    _count(what, count, limit)
    return tuple(_update(u, limits) for u in updates)


def _items(
    items: Iterable[pb.BroadcastItem], count: int, limit: int, limits: CodecLimits
) -> tuple[BroadcastItem, ...]:
    _count("broadcast items", count, limit)
    return tuple(_item(i, limits) for i in items)


def decode_datagram(data: bytes, limits: CodecLimits = DEFAULT_LIMITS) -> Datagram:
    """Decode one datagram's plaintext; raises only `CodecError`."""
    msg = pb.Datagram()
    _parse(msg, data, limits.datagram_bytes_max, "datagram")
    updates = _updates(msg.updates, len(msg.updates), limits.updates_max, "updates", limits)
    items = _items(msg.items, len(msg.items), limits.items_max, limits)
    kind = msg.WhichOneof("body")
    if kind == "ping":
        p = msg.ping
        target = _name(p.target, "target", limits) if p.HasField("target") else None
        source = _name(p.source, "source", limits)
        return Ping(seq=p.seq, source=source, target=target, updates=updates, items=items)
    if kind == "ping_req":
        r = msg.ping_req
        return PingReq(
            seq=r.seq,
            source=_name(r.source, "source", limits),
            target=_name(r.target, "target", limits),
            target_address=_address(r.target_address, "target_address", limits),
            updates=updates,
            items=items,
        )
    if kind in ("ack", "nack"):
        a = msg.ack if kind == "ack" else msg.nack
        cls = Ack if kind == "ack" else Nack
        source = _name(a.source, "source", limits)
        return cls(seq=a.seq, source=source, updates=updates, items=items)
    if kind == "gossip":
        source = _name(msg.gossip.source, "source", limits)
        return Gossip(source=source, updates=updates, items=items)
    raise _fail("swim_unknown_message", "datagram of an unknown message type")


def decode_stream(data: bytes, limits: CodecLimits = DEFAULT_LIMITS) -> PushPull:
    """Decode one push-pull message from the TCP stream; raises only `CodecError`."""
    msg = pb.Stream()
    _parse(msg, data, limits.stream_bytes_max, "stream")
    if msg.WhichOneof("body") != "push_pull":
        raise _fail("swim_unknown_message", "stream message of an unknown type")
    pp = msg.push_pull
    return PushPull(
        source=_name(pp.source, "source", limits),
        members=_updates(pp.members, len(pp.members), limits.members_max, "members", limits),
        items=_items(pp.items, len(pp.items), limits.stream_items_max, limits),
        join=pp.join,
    )


# -- sizes ------------------------------------------------------------------------------

_SIZING_LIMITS = CodecLimits(datagram_bytes_max=2**31)
_BARE_ACK = Ack(0, "")
_BARE_ACK_BYTES = len(encode_datagram(_BARE_ACK, _SIZING_LIMITS))

_CACHED_PAYLOAD_BYTES_MAX = 2048
"""Items with larger payloads are measured uncached: they never fit a datagram
anyway, and the cache must not keep big payloads alive."""


def encoded_size(value: WireValue) -> int:
    """The exact encoded size of a bare datagram or of one piggybacked part.

    This is the machine's `SizeEstimator` (`grid.core.swim.dissemination`), in
    production and in the simulator alike, so piggyback fills datagrams to the
    1,400-byte budget without overflowing it. A part's size includes its
    repeated-field tag and length, measured as the growth of a bare message.
    """
    if isinstance(value, BroadcastItem) and len(value.payload) > _CACHED_PAYLOAD_BYTES_MAX:
        return _measure(value)
    return _measure_cached(value)


def _measure(value: WireValue) -> int:
    if isinstance(value, BroadcastItem):
        carrier = Ack(0, "", items=(value,))
    elif isinstance(value, Ping | PingReq | Ack | Nack | Gossip):
        return len(encode_datagram(value, _SIZING_LIMITS))
    else:
        carrier = Ack(0, "", updates=(value,))
    return len(encode_datagram(carrier, _SIZING_LIMITS)) - _BARE_ACK_BYTES


_measure_cached = functools.lru_cache(maxsize=4096)(_measure)


# -- the TCP stream: 4-byte big-endian length, then one GRID frame ------------------

LENGTH_PREFIX_BYTES = 4


def prefix_length(frame: bytes) -> bytes:
    """Prefix one sealed frame with its 4-byte big-endian length for the TCP stream."""
    return len(frame).to_bytes(LENGTH_PREFIX_BYTES, "big") + frame


class StreamDeframer:
    """Sans-IO splitter of a TCP byte stream into length-prefixed frames.

    Feed it whatever the socket returned; it returns every complete frame. A
    declared length above ``frame_bytes_max`` raises `CodecError` before any
    of that frame is buffered, so a peer cannot make us hold more than that.
    """

    def __init__(
        self, frame_bytes_max: int = DEFAULT_LIMITS.stream_bytes_max + OVERHEAD_BYTES
    ) -> None:
        self.frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return the frames they complete, in order."""
        self._buffer += data
        frames: list[bytes] = []
        while len(self._buffer) >= LENGTH_PREFIX_BYTES:
            size = int.from_bytes(self._buffer[:LENGTH_PREFIX_BYTES], "big")
            if size > self.frame_bytes_max:
                raise _fail("stream_frame_too_large", "declared frame length exceeds the limit")
            end = LENGTH_PREFIX_BYTES + size
            if len(self._buffer) < end:
                break
            frames.append(bytes(self._buffer[LENGTH_PREFIX_BYTES:end]))
            del self._buffer[:end]
        return frames

    @property
    def pending_bytes(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._buffer)
