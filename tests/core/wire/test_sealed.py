"""Sealed messages: encode and seal, unseal and decode, with every drop counted."""

from __future__ import annotations

import os

import pytest

from grid.core.swim.messages import Alive, BroadcastItem, Gossip, Lane, Ping, PushPull
from grid.core.wire.codec import CodecError, DatagramTooLarge
from grid.core.wire.frame import OVERHEAD_BYTES, FrameCounters, seal
from grid.core.wire.keyring import Keyring
from grid.core.wire.sealed import open_datagram, open_stream, seal_datagram, seal_stream

KEY = bytes(range(32))


def test_a_datagram_and_a_push_pull_survive_sealing() -> None:
    keyring, frames = Keyring(KEY), FrameCounters()
    ping = Ping(7, "a", "b", updates=(Alive("a", "10.0.0.1:7946", 3),))
    packet, trimmed = seal_datagram(ping, keyring)
    assert not trimmed and packet[:4] == b"GRID"
    assert open_datagram(packet, keyring, frames) == ping
    state = PushPull("a", (Alive("a", "10.0.0.1:7946", 3),), (), join=True)
    assert open_stream(seal_stream(state, keyring), keyring, frames) == state
    assert frames.total == 0


def test_an_overfull_datagram_is_trimmed_to_a_prefix_and_a_huge_one_refused() -> None:
    keyring = Keyring(KEY)
    updates = tuple(Alive(f"member-{i:03d}", f"10.0.{i}.1:7946", i) for i in range(60))
    packet, trimmed = seal_datagram(Gossip("a", updates=updates), keyring)
    assert trimmed and len(packet) <= 1400 + OVERHEAD_BYTES
    opened = open_datagram(packet, keyring, FrameCounters())
    assert opened is not None and opened.updates == updates[: len(opened.updates)]
    with pytest.raises(DatagramTooLarge):
        seal_datagram(Gossip("x" * 2000), keyring)


def test_a_foreign_key_counts_a_frame_drop_and_bad_plaintext_raises() -> None:
    keyring, frames = Keyring(KEY), FrameCounters()
    packet, _ = seal_datagram(Gossip("a"), Keyring(os.urandom(32)))
    assert open_datagram(packet, keyring, frames) is None
    assert open_stream(packet, keyring, frames) is None
    assert frames.dropped["auth_failed"] == 2
    garbage = seal(KEY, b"\x0a\xff\xff\xff\xff\x0f")
    with pytest.raises(CodecError):
        open_datagram(garbage, keyring, frames)
    with pytest.raises(CodecError):
        open_stream(garbage, keyring, frames)
    item = BroadcastItem(Lane.STATE, "a", 1, b"x")
    assert open_datagram(seal_datagram(Gossip("a", items=(item,)), keyring)[0], keyring, frames)
