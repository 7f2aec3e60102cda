"""`SwimNode` on 127.0.0.1: the production runtime drives the machine as the simulator does.

Each test starts real nodes (UDP and TCP on one loopback port, AES-GCM frames)
in this process. Waits poll a condition with a deadline; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from grid.adapters.swim_metrics import SwimCollector
from grid.adapters.swim_node import SwimNode
from grid.adapters.udp import format_address, parse_address
from grid.core.swim.admission import REFUSAL_REASONS
from grid.core.swim.config import SwimConfig
from grid.core.swim.members import MemberState
from grid.core.swim.messages import Alive, Gossip
from grid.core.wire import codec
from grid.core.wire.frame import seal
from grid.core.wire.keyring import Keyring
from grid.testing.poll import eventually

KEY = bytes(range(32))
DEADLINE_S = 10.0

QUIET = SwimConfig(
    gossip_nodes=0,
    gossip_interval_s=0.05,
    probe_interval_s=3600.0,
    probe_timeout_s=1.0,
    push_pull_interval_s=0.0,
)
"""No gossip fan-out, probes an hour apart, no periodic push-pull: a member
learns of a joiner it never exchanged with only through the joiner's direct
introduction, which a push-pull *reply* owes to every member it names."""

FAST = SwimConfig(
    probe_interval_s=0.1,
    probe_timeout_s=0.05,
    suspicion_timeout_s=0.3,
    push_pull_interval_s=0.4,
)

StartNode = Callable[..., Awaitable[SwimNode]]


@pytest.fixture
async def start_node() -> AsyncIterator[StartNode]:
    """Start nodes on 127.0.0.1:0; every node is stopped afterwards."""
    started: list[SwimNode] = []

    async def start(node_id: str, *, seeds: Sequence[SwimNode] = (), **kwargs: Any) -> SwimNode:
        node = await SwimNode.start(
            node_id,
            "127.0.0.1:0",
            Keyring(KEY),
            seeds=[seed.address for seed in seeds],
            rng=random.Random(node_id),
            **kwargs,
        )
        started.append(node)
        return node

    yield start
    for node in started:
        await node.stop()


def alive_ids(node: SwimNode) -> set[str]:
    return node.members_in(MemberState.ALIVE)


async def test_a_push_pull_reply_introduces_the_joiner_to_the_members_it_names(
    start_node: StartNode,
) -> None:
    seed = await start_node("seed", config=QUIET)
    first = await start_node("first", seeds=[seed], config=QUIET)
    await eventually(lambda: alive_ids(seed) == {"first"}, "the seed holds the first joiner")
    # The seed's reply to this joiner names `first`: only the joiner's
    # introduction can tell `first` about it (nobody gossips, nobody probes).
    second = await start_node("second", seeds=[seed], config=QUIET)
    await eventually(
        lambda: alive_ids(second) == {"seed", "first"}, "the joiner merged the seed's reply"
    )
    await eventually(
        lambda: "second" in alive_ids(first),
        "the member named in the reply learned of the joiner",
        timeout_s=DEADLINE_S,
    )
    assert alive_ids(first) == {"seed", "second"}
    assert all(node.counters.machine_errors == 0 for node in (seed, first, second))


async def test_a_machine_exception_is_logged_with_its_traceback_counted_and_survived(
    start_node: StartNode, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = await start_node("one", config=FAST)
    two = await start_node("two", seeds=[one], config=FAST)
    await eventually(lambda: alive_ids(one) == {"two"} and alive_ids(two) == {"one"}, "a mesh")
    machine = one.machine
    real = machine.handle_packet
    failures: list[int] = []

    def broken(*args: Any) -> Any:
        if not failures:
            failures.append(1)
            raise KeyError("a bug in the machine")
        return real(*args)

    monkeypatch.setattr(machine, "handle_packet", broken)
    caplog.set_level(logging.ERROR, logger="grid.adapters.swim_node")
    await eventually(lambda: one.counters.machine_errors == 1, "the failure was counted")
    records = [r for r in caplog.records if r.name == "grid.adapters.swim_node"]
    assert len(records) == 1
    assert records[0].exc_info is not None and records[0].exc_info[0] is KeyError
    assert "Traceback" in caplog.text and "a bug in the machine" in caplog.text
    # The node goes on: it keeps answering probes and keeps its peer alive.
    received = one.counters.datagrams_received
    await eventually(
        lambda: one.counters.datagrams_received > received + 10, "the node still takes datagrams"
    )
    assert alive_ids(one) == {"two"} and alive_ids(two) == {"one"}
    assert one.counters.machine_errors == 1


FLOOD_WAVE = 16


class Sink(asyncio.DatagramProtocol):
    """A UDP socket that never answers: it only counts what reaches it."""

    def __init__(self) -> None:
        self.datagrams = 0

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        self.datagrams += 1


def flood_datagrams(sink_address: str, count: int = 3000, per_datagram: int = 38) -> list[bytes]:
    """The probe's flood: sealed Gossip datagrams announcing `count` fake members at the sink."""
    fakes = [Alive(f"fake-{i:04d}", sink_address, 0) for i in range(count)]
    return [
        seal(
            KEY,
            codec.encode_datagram(Gossip("mallory", updates=tuple(fakes[i : i + per_datagram]))),
        )
        for i in range(0, count, per_datagram)
    ]


def fakes_refused(node: SwimNode) -> int:
    """Announced fakes east refused because one of them already holds the sink's address.

    Once the first fake's challenges go unanswered the address cools, and the
    fakes after it are refused as ``cooling_down`` instead of ``address_taken``."""
    refused = node.machine.admission.refused
    return refused["address_taken"] + refused["cooling_down"]


async def test_a_flood_of_announced_members_is_never_admitted_nor_reflected(
    start_node: StartNode,
) -> None:
    """The outside probe's flood: 79 sealed Gossip datagrams in 0.2 s, 3,000 fakes at a sink.

    Before members had to prove themselves, east's table took all 3,000, the fakes
    spread, east's probes went mostly to the sink, and the real east was
    suspected and declared dead by its peers.
    """
    east = await start_node("east", config=FAST)
    west = await start_node("west", seeds=[east], config=FAST)
    central = await start_node("central", seeds=[east], config=FAST)
    mesh = [east, west, central]
    await eventually(
        lambda: all(len(alive_ids(n)) == 2 for n in mesh), "the three sites see each other"
    )
    loop = asyncio.get_running_loop()
    transport, sink = await loop.create_datagram_endpoint(Sink, local_addr=("127.0.0.1", 0))
    try:
        sink_address = format_address(*transport.get_extra_info("sockname")[:2])
        packets = flood_datagrams(sink_address)
        assert len(packets) == 79
        target = parse_address(east.address)
        # In waves of 16, each taken before the next, so that no kernel drops
        # the flood where `rmem_max` caps the node's receive buffer. On a loaded
        # machine the first fake's challenges can time out mid-flood: the fakes
        # after that are refused as cooling down, which `fakes_refused` counts.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
            for first in range(0, len(packets), FLOOD_WAVE):
                wave = packets[first : first + FLOOD_WAVE]
                for packet in wave:
                    raw.sendto(packet, target)
                announced = min(3000, (first + len(wave)) * 38)
                await eventually(
                    lambda n=announced: fakes_refused(east) >= n - 1,  # the first one waits
                    f"east took the flood's first {announced} fakes",
                )
        # Thirty probe rounds later (east probes every 0.1 s) ...
        sent = east.counters.datagrams_sent
        await eventually(lambda: east.counters.datagrams_sent > sent + 60, "thirty rounds pass")
        for node in mesh:
            assert len(node.members()) == 2, node.node_id  # no fake in any table
            assert not any(m.id.startswith("fake-") for m in node.members())
        assert sink.datagrams <= FAST.proof_attempts  # no reflection
        assert east.machine.unproven_count <= 1
        assert fakes_refused(east) == 2999
        # What the caps refused is on /metrics, under closed labels.
        registry = CollectorRegistry()
        registry.register(SwimCollector(lambda: (east.counters, None)))
        text = generate_latest(registry).decode()
        refused = re.findall(r'grid_swim_members_refused_total\{reason="(\w+)"\} (\S+)', text)
        assert {reason for reason, _ in refused} == set(REFUSAL_REASONS)
        counted = dict(refused)
        assert float(counted["address_taken"]) + float(counted["cooling_down"]) == 2999
        challenges = re.search(r"^grid_swim_member_challenges_total (\S+)$", text, re.M)
        assert challenges is not None and float(challenges[1]) == east.machine.admission.challenges
        assert all(alive_ids(n) == {m.node_id for m in mesh} - {n.node_id} for n in mesh)
        assert all(n.counters.machine_errors == 0 for n in mesh)
    finally:
        transport.close()
