"""`SwimNode` on 127.0.0.1: the production runtime drives the machine as the simulator does.

Each test starts real nodes (UDP and TCP on one loopback port, AES-GCM frames)
in this process. Waits poll a condition with a deadline; nothing sleeps.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest

from grid.adapters.swim_node import SwimNode
from grid.core.swim.config import SwimConfig
from grid.core.swim.members import MemberState
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
