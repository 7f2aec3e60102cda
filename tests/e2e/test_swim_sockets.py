"""Encrypted SWIM meshes on real loopback sockets: membership, keys, big state, garbage, leave.

Every node is a `SwimNode` (UDP and TCP on one port of 127.0.0.1) in this
process, with fast timings (100 ms probe rounds) so each scenario settles in
well under a second of protocol time. Nothing sleeps for a fixed time: every
wait polls a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest

from grid.adapters.swim_node import SwimNode, SwimNodeSettings
from grid.adapters.udp import parse_address
from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import GridStateSnapshot
from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import Deliver, EventKind, Notify
from grid.core.swim.members import MemberState
from grid.core.swim.messages import Alive, BroadcastItem, Lane, Ping
from grid.core.wire import codec
from grid.core.wire.frame import seal
from grid.core.wire.keyring import Keyring
from grid.testing.poll import eventually

KEY = bytes(range(32))
WRONG_KEY = bytes(reversed(range(32)))
FAST = SwimConfig(
    probe_interval_s=0.1,
    probe_timeout_s=0.05,
    suspicion_timeout_s=0.3,
    push_pull_interval_s=0.4,
)
DEADLINE_S = 15.0

StartNode = Callable[..., Awaitable[SwimNode]]


@pytest.fixture
async def start_node() -> AsyncIterator[StartNode]:
    """Start nodes on 127.0.0.1:0; every node still running is stopped afterwards."""
    started: list[SwimNode] = []

    async def start(
        node_id: str, *, seeds: Sequence[SwimNode] = (), key: bytes = KEY, **kwargs: Any
    ) -> SwimNode:
        node = await SwimNode.start(
            node_id,
            "127.0.0.1:0",
            Keyring(key),
            config=kwargs.pop("config", FAST),
            seeds=[seed.address for seed in seeds],
            **kwargs,
        )
        started.append(node)
        return node

    yield start
    for node in started:
        await node.stop()


async def start_mesh(start_node: StartNode, count: int, **kwargs: Any) -> list[SwimNode]:
    first = await start_node("site-0", **kwargs)
    nodes = [first]
    for i in range(1, count):
        nodes.append(await start_node(f"site-{i}", seeds=[first], **kwargs))
    await eventually(lambda: full_membership(nodes), "full_membership(nodes)", timeout_s=DEADLINE_S)
    return nodes


def full_membership(nodes: list[SwimNode]) -> bool:
    everyone = {node.node_id for node in nodes}
    return all(node.members_in(MemberState.ALIVE) == everyone - {node.node_id} for node in nodes)


def drain(node: SwimNode) -> list[Notify | Deliver]:
    events = []
    while not node.events.empty():
        events.append(node.events.get_nowait())
    return events


async def test_five_encrypted_nodes_converge_to_full_membership(start_node: StartNode) -> None:
    nodes = await start_mesh(start_node, 5)
    # Membership may complete by the join exchanges alone; probes follow.
    await eventually(
        lambda: all(
            n.counters.datagrams_received > 0 and n.counters.datagrams_sent > 0 for n in nodes
        ),
        "all(n.counters.datagrams_received > 0 and n.counters.datagrams_sent > 0 for n in nodes)",
        timeout_s=DEADLINE_S,
    )
    for node in nodes:
        joined = {e.member for e in drain(node) if isinstance(e, Notify)}
        assert joined == {n.node_id for n in nodes} - {node.node_id}
        assert sum(node.counters.datagrams_dropped.values()) == 0
        assert sum(node.counters.streams_dropped.values()) == 0
        assert node.counters.machine_errors == 0


async def test_a_node_holding_the_wrong_key_is_never_admitted(start_node: StartNode) -> None:
    nodes = await start_mesh(start_node, 4)
    intruder = await start_node("intruder", seeds=nodes, key=WRONG_KEY)
    # Its gossip over UDP, sealed with its key, claims it is alive.
    claim = Ping(1, "intruder", None, updates=(Alive("intruder", intruder.address, 9),))
    packet = seal(WRONG_KEY, codec.encode_datagram(claim))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
        for node in nodes:
            raw.sendto(packet, parse_address(node.address))
    # Wait for its seed exchanges to be refused more than once (it retries when alone).
    await eventually(
        lambda: intruder.counters.push_pulls_failed >= len(nodes) + 2,
        "intruder.counters.push_pulls_failed >= len(nodes) + 2",
        timeout_s=DEADLINE_S,
    )
    await eventually(
        lambda: all(n.counters.datagrams_dropped["auth_failed"] >= 1 for n in nodes),
        "all(n.counters.datagrams_dropped['auth_failed'] >= 1 for n in nodes)",
        timeout_s=DEADLINE_S,
    )
    refused = sum(n.counters.streams_dropped["auth_failed"] for n in nodes)
    assert refused >= len(nodes) + 2
    assert intruder.members() == []
    for node in nodes:
        assert "intruder" not in {m.id for m in node.members()}
    assert intruder.counters.push_pulls_completed == 0
    assert full_membership(nodes)


def big_snapshot(origin: str, providers: int) -> GridStateSnapshot:
    snapshot = GridStateSnapshot.empty(origin)
    for i in range(providers):
        record = ProviderRecord(
            name=f"provider-{i:04d}",
            cluster=f"cluster-{i:04d}",
            site=origin,
            backend_kind="local",
            models=("llama-3.1-8b-instruct",),
            healthy=True,
            observed_at=1_700_000_000.0,
            signals=RecordSignals(queue_depth=0.25, kv_cache_utilization=0.5),
        )
        snapshot = snapshot.put_provider(f"provider-{i:04d}", record)
    return snapshot.add_capability("models", "llama-3.1-8b-instruct")


async def test_a_snapshot_with_2000_providers_reaches_every_peer(start_node: StartNode) -> None:
    # Default payload limits: one site's 2,000 providers must be accepted as is.
    first = await start_node("site-0", replica=GridState("site-0"))
    nodes = [first]
    for i in range(1, 4):
        replica = GridState(f"site-{i}")
        nodes.append(await start_node(f"site-{i}", seeds=[first], replica=replica))
    await eventually(lambda: full_membership(nodes), "full_membership(nodes)", timeout_s=DEADLINE_S)
    assert await first.publish_snapshot(big_snapshot("site-0", 2000)) == 1

    def everyone_has_it() -> bool:
        for node in nodes[1:]:
            assert node.replica is not None
            snapshot = node.replica.snapshot("site-0")
            if snapshot is None or len(snapshot.state.live_providers()) != 2000:
                return False
        return True

    await eventually(everyone_has_it, "everyone has it", timeout_s=DEADLINE_S)
    payload_bytes = len(first.replica.item("site-0", Lane.STATE).payload)  # type: ignore[union-attr,arg-type]
    assert payload_bytes > 100_000
    for node in nodes[1:]:
        assert node.replica is not None
        assert node.replica.capabilities("models") == {"llama-3.1-8b-instruct"}
        assert node.counters.stream_bytes_received > payload_bytes  # it came by push-pull
        assert node.counters.datagrams_dropped["oversize"] == 0
        assert sum(node.replica.counters.dropped.values()) == 0


async def test_garbage_datagrams_and_frames_are_dropped_without_harm(
    start_node: StartNode,
) -> None:
    nodes = await start_mesh(start_node, 3)
    target = nodes[0]
    host, port = parse_address(target.address)
    valid = seal(KEY, codec.encode_datagram(Ping(5, "site-1", "site-0")))
    datagrams = [
        os.urandom(300),
        b"",
        valid[:20],
        b"GRIX" + valid[4:],
        b"GRID\x09" + valid[5:],
        valid[:-3] + b"abc",
        seal(KEY, b"\x0a\xff\xff\xff\xff\x0f"),
        os.urandom(4000),
    ]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
        for packet in datagrams:
            raw.sendto(packet, (host, port))
    frames = [
        struct.pack(">I", 2**31) + b"x",
        struct.pack(">I", 100) + b"short",
        struct.pack(">I", len(valid)) + b"GRIX" + valid[4:],
        struct.pack(">I", 12) + os.urandom(12),
        os.urandom(3),
    ]
    for frame in frames:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(frame)
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        await writer.wait_closed()
    await eventually(
        lambda: sum(target.counters.datagrams_dropped.values()) == len(datagrams),
        "sum(target.counters.datagrams_dropped.values()) == len(datagrams)",
        timeout_s=DEADLINE_S,
    )
    await eventually(
        lambda: sum(target.counters.streams_dropped.values()) == len(frames),
        "sum(target.counters.streams_dropped.values()) == len(frames)",
        timeout_s=DEADLINE_S,
    )
    dropped = target.counters.datagrams_dropped
    assert dropped["oversize"] == 1 and dropped["malformed"] == 1 and dropped["too_short"] == 2
    # The node still gossips: an item it publishes reaches the others.
    await target.publish(BroadcastItem(Lane.METADATA, "site-0", 1, b"still here"))

    def delivered(node: SwimNode) -> bool:
        return node.machine.known_items() == [
            BroadcastItem(Lane.METADATA, "site-0", 1, b"still here")
        ]

    await eventually(
        lambda: all(delivered(node) for node in nodes[1:]),
        "all(delivered(node) for node in nodes[1:])",
        timeout_s=DEADLINE_S,
    )
    assert full_membership(nodes)
    assert target.counters.machine_errors == 0


async def test_graceful_leave_is_seen_as_left_not_failed(start_node: StartNode) -> None:
    nodes = await start_mesh(start_node, 4)
    leaving, stay = nodes[3], nodes[:3]
    await leaving.leave()
    await eventually(
        lambda: all("site-3" in n.members_in(MemberState.LEFT) for n in stay),
        "all('site-3' in n.members_in(MemberState.LEFT) for n in stay)",
        timeout_s=DEADLINE_S,
    )
    for node in stay:
        kinds = [e.kind for e in drain(node) if isinstance(e, Notify) and e.member == "site-3"]
        assert EventKind.LEFT in kinds
        assert EventKind.DEAD not in kinds
        assert EventKind.SUSPECT not in kinds
    # A crash, by contrast, is detected as a failure.
    crashed = stay[2]
    await crashed.stop()
    await eventually(
        lambda: all("site-2" in n.members_in(MemberState.DEAD) for n in stay[:2]),
        "all('site-2' in n.members_in(MemberState.DEAD) for n in stay[:2])",
        timeout_s=DEADLINE_S,
    )


async def test_keys_rotate_without_a_flag_day(start_node: StartNode) -> None:
    nodes = await start_mesh(start_node, 3)
    new_key = os.urandom(32)

    async def traffic_flows() -> None:
        marks = [n.counters.datagrams_received for n in nodes]
        await eventually(
            lambda: all(
                n.counters.datagrams_received > m + 2 for n, m in zip(nodes, marks, strict=True)
            ),
            "all(n.counters.datagrams_received > m + 2 for n, m in zip(nodes, marks, strict=True))",
            timeout_s=DEADLINE_S,
        )

    for keyring in (Keyring(KEY, [new_key]), Keyring(new_key, [KEY]), Keyring(new_key)):
        for node in nodes:  # one member at a time, the mesh stays whole
            node.set_keyring(keyring)
            await traffic_flows()
            assert full_membership(nodes)
    assert all(n.counters.datagrams_dropped["auth_failed"] == 0 for n in nodes)
    assert all(n.counters.streams_dropped["auth_failed"] == 0 for n in nodes)
    # A member still on the retired key alone is now refused.
    stale = await start_node("stale", seeds=nodes[:1], key=KEY)
    await eventually(
        lambda: stale.counters.push_pulls_failed >= 1,
        "stale.counters.push_pulls_failed >= 1",
        timeout_s=DEADLINE_S,
    )
    assert stale.members() == []
    assert nodes[0].counters.streams_dropped["auth_failed"] >= 1


async def test_timers_and_tasks_stay_bounded_and_stop_leaves_nothing(
    start_node: StartNode,
) -> None:
    nodes = await start_mesh(start_node, 3)
    await eventually(
        lambda: all(n.counters.datagrams_received >= 30 for n in nodes),
        "all(n.counters.datagrams_received >= 30 for n in nodes)",
        timeout_s=DEADLINE_S,
    )
    for node in nodes:
        # Probe tick, probe timeout, push-pull tick, a relay or suspicion or two.
        assert len(node._timers) <= 8
    swim_tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("swim:")]
    assert len(swim_tasks) == len(nodes)
    for node in nodes:
        await node.stop()
        assert len(node._timers) == 0
    await eventually(
        lambda: not [t for t in asyncio.all_tasks() if t.get_name().startswith("swim:")],
        "not [t for t in asyncio.all_tasks() if t.get_name().startswith('swim:')]",
        timeout_s=DEADLINE_S,
    )


async def test_a_restarted_site_reasserts_its_own_lane_above_what_peers_hold(
    start_node: StartNode,
) -> None:
    replicas = [GridState(f"site-{i}") for i in range(3)]
    first = await start_node("site-0", replica=replicas[0])
    nodes = [first] + [
        await start_node(f"site-{i}", seeds=[first], replica=replicas[i]) for i in (1, 2)
    ]
    await eventually(lambda: full_membership(nodes), "full_membership(nodes)", timeout_s=DEADLINE_S)
    await first.publish_snapshot(big_snapshot("site-0", 3))
    published = replicas[0].local.revision(Lane.STATE)

    def peers_hold(revision: int) -> bool:
        for replica in replicas[1:]:
            snapshot = replica.snapshot("site-0")
            if snapshot is None or snapshot.revision(Lane.STATE) != revision:
                return False
        return True

    await eventually(lambda: peers_hold(published), "peers_hold(published)", timeout_s=DEADLINE_S)
    await first.stop()
    # The site restarts with an empty replica whose revisions start over at 0.
    reborn = GridState("site-0")
    await start_node("site-0", seeds=nodes[1:2], replica=reborn)
    await eventually(
        lambda: reborn.local.revision(Lane.STATE) == published + 1,
        "reborn.local.revision(Lane.STATE) == published + 1",
        timeout_s=DEADLINE_S,
    )
    assert len(reborn.local.state.live_providers()) == 3  # our old state, joined
    await eventually(
        lambda: peers_hold(published + 1), "peers_hold(published + 1)", timeout_s=DEADLINE_S
    )


async def test_an_owner_that_stops_reading_loses_events_not_memory(
    start_node: StartNode,
) -> None:
    nodes = await start_mesh(start_node, 4, settings=SwimNodeSettings(events_max=2))
    for node in nodes:
        assert node.events.qsize() == 2
        assert node.counters.events_dropped >= 1
