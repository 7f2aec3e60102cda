"""Broadcast items: publication rules, delivery of news only, push-pull of items."""

from __future__ import annotations

import random

import pytest

from grid.core.swim.effects import Deliver
from grid.core.swim.machine import SwimMachine
from grid.core.swim.messages import BroadcastItem, Lane, Ping
from grid.core.wire.codec import encoded_size
from grid.errors import ValidationError

from .conftest import MachineFactory, peer_address


def test_publish_requires_our_origin_and_a_growing_revision(make_machine: MachineFactory):
    machine, _ = make_machine()
    machine.publish(BroadcastItem(Lane.STATE, "me", 1, b"one"))
    with pytest.raises(ValidationError):
        machine.publish(BroadcastItem(Lane.STATE, "me", 1, b"again"))
    with pytest.raises(ValidationError):
        machine.publish(BroadcastItem(Lane.STATE, "p1", 5, b"not ours"))
    machine.publish(BroadcastItem(Lane.GATEWAY, "me", 1, b"own lane, own revision"))


def test_only_newer_items_are_delivered(make_machine: MachineFactory):
    machine, _ = make_machine()
    newer = BroadcastItem(Lane.STATE, "p1", 2, b"v2")
    older = BroadcastItem(Lane.STATE, "p1", 1, b"v1")
    other_lane = BroadcastItem(Lane.METADATA, "p1", 1, b"m1")
    delivered = []
    for seq, entry in enumerate((newer, newer, older, other_lane)):
        out = machine.handle_packet(peer_address(1), Ping(seq, "p1", "me", items=(entry,)), 1.0)
        delivered += [e.item for e in out if isinstance(e, Deliver)]
    assert delivered == [newer, other_lane]
    assert set(machine.known_items()) == {newer, other_lane}


def test_push_pull_carries_items_that_gossip_missed(make_machine: MachineFactory):
    source, _ = make_machine()
    source.publish(BroadcastItem(Lane.CERT, "me", 3, b"pem"))
    sink = SwimMachine("sink", "10.0.0.200:7946", rng=random.Random(2), size_of=encoded_size)
    sink.join((), 0.0)
    reply, out = sink.handle_push_pull(source.push_pull_message(join=False), 2.0)
    assert [e.item for e in out if isinstance(e, Deliver)] == [
        BroadcastItem(Lane.CERT, "me", 3, b"pem")
    ]
    # A request's members are announced, not admitted: they wait to answer a challenge.
    assert sink.member("me") is None and sink.live_count == 0 and sink.unproven_count == 5
    assert reply.source == "sink"


def test_forgotten_origin_leaves_push_pull_and_is_delivered_anew(make_machine: MachineFactory):
    machine, _ = make_machine()
    gone = BroadcastItem(Lane.STATE, "p1", 4, b"old site")
    kept = BroadcastItem(Lane.STATE, "p2", 1, b"live site")
    machine.handle_packet(peer_address(1), Ping(1, "p1", "me", items=(gone, kept)), 1.0)
    machine.forget_origin("p1")
    assert machine.push_pull_message(join=False).items == (kept,)
    out = machine.handle_packet(peer_address(3), Ping(2, "p3", "me", items=(gone,)), 2.0)
    assert [e.item for e in out if isinstance(e, Deliver)] == [gone]
