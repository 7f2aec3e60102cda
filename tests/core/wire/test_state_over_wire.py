"""End to end in the core: lane items piggybacked on sealed SWIM datagrams converge."""

from __future__ import annotations

import random

from grid.core.crdt import Lane, ProviderRecord, RecordSignals
from grid.core.crdt.replica import GridState, MergeOutcome
from grid.core.swim.messages import BroadcastItem, Ping, PushPull
from grid.core.wire.codec import (
    StreamDeframer,
    decode_datagram,
    decode_stream,
    encode_stream,
    pack_datagram,
    prefix_length,
)
from grid.core.wire.frame import FrameCounters
from grid.core.wire.keyring import Keyring

KEY = bytes(range(32))


def _nonces(seed: int) -> random.Random:
    return random.Random(seed)


def test_state_items_travel_in_sealed_datagrams_and_converge() -> None:
    rnd = _nonces(7)
    ring = Keyring(KEY)
    east, west = GridState("east"), GridState("west")
    record = ProviderRecord(
        name="vllm-a",
        cluster="vllm-a",
        site="east",
        backend_kind="local",
        models=("llama",),
        healthy=True,
        observed_at=1.0,
        signals=RecordSignals(queue_depth=0.25),
    )
    items = east.update_local(east.local.put_provider("vllm-a", record).add_spend("t", 3))
    swim_items = tuple(BroadcastItem(i.lane, i.origin, i.revision, i.payload) for i in items)
    plaintext, _, n_items = pack_datagram(Ping(1, "east", "west", items=swim_items))
    assert n_items == len(swim_items)
    packet = ring.seal(plaintext, rnd.randbytes(12))

    counters = FrameCounters()
    opened = ring.open_or_drop(packet, counters)
    assert opened is not None and counters.total == 0
    received = decode_datagram(opened)
    assert [west.apply(item) for item in received.items] == [MergeOutcome.APPLIED]
    assert west.snapshot("east") == east.local
    assert next(west.providers())[2] == record


def test_push_pull_over_the_length_prefixed_stream_converges() -> None:
    rnd = _nonces(8)
    ring = Keyring(KEY)
    east, west = GridState("east"), GridState("west")
    east.update_local(east.local.add_capability("models", "llama"))
    west.update_local(west.local.add_capability("models", "qwen").add_spend("t", 2))

    def push(src: GridState, dst: GridState) -> None:
        items = tuple(BroadcastItem(i.lane, i.origin, i.revision, i.payload) for i in src.items())
        wire = prefix_length(
            ring.seal(encode_stream(PushPull(src.local_origin, (), items)), rnd.randbytes(12))
        )
        deframer = StreamDeframer()
        frames = deframer.feed(wire[:5]) + deframer.feed(wire[5:])
        message = decode_stream(ring.unseal(frames[0]))
        for item in message.items:
            dst.apply(item)

    push(east, west)
    push(west, east)
    assert east.capabilities("models") == west.capabilities("models") == {"llama", "qwen"}
    for origin in ("east", "west"):
        assert east.snapshot(origin) == west.snapshot(origin)
    assert east.spend("t").value == 2
    assert Lane.STATE in {i.lane for i in east.items()}
