"""Decoders of untrusted bytes have two outcomes: a value or a ProtocolError.

At least 100,000 inputs in all: random bytes, and mutations of valid encodings
(bit flips, truncation, extension, splices, insertions, deletions), through the
SWIM datagram and stream decoders, the lane payload and snapshot decoders, the
GRID frame and the TCP deframer. Every failure reports its seed and input.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable

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
from grid.core.swim import messages as m
from grid.core.wire.codec import (
    StreamDeframer,
    decode_datagram,
    decode_stream,
    encode_datagram,
    encode_stream,
    prefix_length,
)
from grid.core.wire.frame import seal, unseal
from grid.errors import ProtocolError

SEED = int(os.environ.get("GRID_FUZZ_SEED", "20261130"))
INPUTS_PER_DECODER = 12_500
KEY = bytes(range(32))


def _snapshot(rnd: random.Random) -> GridStateSnapshot:
    snap = GridStateSnapshot.empty("east", base_revision=rnd.randrange(5))
    for i in range(rnd.randrange(1, 4)):
        rec = ProviderRecord(
            name=f"p{i}",
            cluster="c",
            site="east",
            backend_kind=rnd.choice(("local", "remote", "cloud_managed", "api_provider")),
            models=("llama", "qwen")[: rnd.randrange(3)],
            healthy=rnd.choice((None, True, False)),
            observed_at=rnd.random() * 2e9,
            signals=RecordSignals(queue_depth=rnd.choice((None, rnd.random()))),
        )
        snap = snap.put_provider(f"p{i}", rec)
    snap = snap.add_capability("models", "llama").add_capability("tools", "t")
    snap = snap.remove_capability("tools", "t").add_spend("tenant", rnd.randrange(1, 99))
    snap = snap.set_lane(Lane.GATEWAY, GatewayLaneValue("10.0.0.1:443", (("g", "1.1.1.1:80"),)))
    snap = snap.set_lane(Lane.CERT, CertLaneValue("-----BEGIN CERTIFICATE-----\nAA\n"))
    return snap.set_lane(Lane.METADATA, MetadataLaneValue("eu", "z", "s", (("k", "v"),)))


def _messages(rnd: random.Random) -> tuple[list[bytes], list[bytes]]:
    updates = (
        m.Alive("west", "10.0.0.2:7946", rnd.randrange(2**40)),
        m.Suspect("north", "10.0.0.3:7946", 3, "east"),
        m.Dead("south", "", 9, "south"),
    )
    items = (
        m.BroadcastItem(m.Lane.STATE, "east", 5, bytes(rnd.randrange(256) for _ in range(30))),
    )
    datagrams: list[m.Datagram] = [
        m.Ping(1, "east", "west", updates, items),
        m.Ping(2, "east", None, updates[:1]),
        m.PingReq(3, "east", "west", "10.0.0.2:7946", updates[1:], items),
        m.Ack(2**64 - 1, "west", updates, items),
        m.Nack(4, "north"),
        m.Gossip("south", updates, items),
    ]
    streams = [m.PushPull("east", updates, items * 3, join=True), m.PushPull("west", (), ())]
    return [encode_datagram(d) for d in datagrams], [encode_stream(s) for s in streams]


def _mutate(rnd: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    choice = rnd.randrange(8)
    buf = bytearray(data)
    if choice == 0 or not buf:
        return rnd.randbytes(rnd.randrange(64))
    if choice == 1:
        for _ in range(rnd.randrange(1, 4)):
            buf[rnd.randrange(len(buf))] ^= 1 << rnd.randrange(8)
        return bytes(buf)
    if choice == 2:
        return bytes(buf[: rnd.randrange(len(buf))])
    if choice == 3:
        return bytes(buf) + rnd.randbytes(rnd.randrange(1, 32))
    if choice == 4:
        other = rnd.choice(corpus)
        return bytes(buf[: rnd.randrange(len(buf) + 1)]) + other[rnd.randrange(len(other) + 1) :]
    if choice == 5:
        at = rnd.randrange(len(buf) + 1)
        return bytes(buf[:at]) + rnd.randbytes(rnd.randrange(1, 8)) + bytes(buf[at:])
    if choice == 6:
        at = rnd.randrange(len(buf))
        return bytes(buf[:at]) + bytes(buf[at + rnd.randrange(1, 8) :])
    buf[rnd.randrange(len(buf))] = rnd.choice((0x00, 0x7F, 0x80, 0xFF))
    return bytes(buf)


def _fuzz(
    name: str, decode: Callable[[bytes], object], corpus: list[bytes], rnd: random.Random
) -> int:
    for decode_input in corpus:
        decode(decode_input)  # valid encodings decode
    for i in range(INPUTS_PER_DECODER):
        data = _mutate(rnd, rnd.choice(corpus), corpus)
        try:
            decode(data)
        except ProtocolError:
            pass
        except Exception as exc:  # pragma: no cover - the failure report
            raise AssertionError(
                f"{name} raised {type(exc).__name__} on input {i} "
                f"(GRID_FUZZ_SEED={SEED}): {data.hex()}"
            ) from exc
    return INPUTS_PER_DECODER


def _deframe(data: bytes) -> object:
    return StreamDeframer(frame_bytes_max=4096).feed(data)


def test_decoders_return_a_value_or_raise_protocol_error_only() -> None:
    rnd = random.Random(SEED)
    datagrams, streams = _messages(rnd)
    snaps = [_snapshot(rnd) for _ in range(4)]
    lanes = {lane: [encode_lane(s.lane_value(lane)) for s in snaps] for lane in Lane}
    frames = [seal(KEY, d, rnd.randbytes(12)) for d in datagrams]
    total = 0
    total += _fuzz("decode_datagram", decode_datagram, datagrams, rnd)
    total += _fuzz("decode_stream", decode_stream, streams, rnd)
    total += _fuzz("decode_snapshot", decode_snapshot, [encode_snapshot(s) for s in snaps], rnd)
    for lane, corpus in lanes.items():
        total += _fuzz(
            f"decode_lane({lane})", lambda b, ln=lane: decode_lane(ln, b, "east"), corpus, rnd
        )
    total += _fuzz("unseal", lambda b: unseal([KEY], b), frames, rnd)
    total += _fuzz("deframe", _deframe, [prefix_length(f) for f in frames], rnd)
    assert total >= 100_000


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256), st.sampled_from(list(Lane)))
def test_arbitrary_bytes_never_escape_as_anything_but_protocol_error(
    data: bytes, lane: Lane
) -> None:
    decoders: list[Callable[[bytes], object]] = [
        decode_datagram,
        decode_stream,
        decode_snapshot,
        lambda b: decode_lane(lane, b, "east"),
        lambda b: unseal([KEY], b),
        _deframe,
    ]
    for decode in decoders:
        with contextlib.suppress(ProtocolError):
            decode(data)
