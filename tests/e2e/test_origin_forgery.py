"""A holder of the SWIM key who is not west cannot change what the others believe about west.

Real `SwimNode`s (east, west, central) on 127.0.0.1 sign their items with
their own dev-CA site keys and verify each other's. The forger holds the SWIM
key and even a certificate from the same grid CA, issued to ``mallory``, but
not west's key. Over real sealed UDP datagrams and a real TCP push-pull it sends
state, gateway and cert items for west: the reported item (revision 2^62, 200
random bytes), a well-formed state item signed with mallory's key, the same
unsigned, and mallory's certificate claimed for west. Every site must drop them
(counted), keep west's provider, and keep taking west's own writes.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator

import pytest

from grid.adapters.pushpull import PushPullSettings, exchange
from grid.adapters.swim_node import SwimNode
from grid.adapters.udp import TransportCounters, parse_address
from grid.core.crdt.payload import encode_lane
from grid.core.crdt.record import ProviderRecord
from grid.core.crdt.snapshot import GatewayLaneValue, GridStateSnapshot, Lane
from grid.core.swim.config import SwimConfig
from grid.core.swim.messages import Alive, BroadcastItem, Gossip, PushPull
from grid.core.wire import codec
from grid.core.wire.frame import seal
from grid.core.wire.keyring import Keyring
from grid.testing.origin import SitePki
from grid.testing.poll import eventually

KEY = bytes(range(32))
FAST = SwimConfig(
    probe_interval_s=0.1, probe_timeout_s=0.05, suspicion_timeout_s=0.3, push_pull_interval_s=0.4
)
SITES = ("east", "west", "central")
DEADLINE_S = 15.0


def _record(name: str, observed_at: float) -> ProviderRecord:
    return ProviderRecord(
        name=name, cluster=name, site="west", backend_kind="local", models=("m",),
        healthy=True, observed_at=observed_at,
    )  # fmt: skip


@pytest.fixture
async def mesh() -> AsyncIterator[tuple[SitePki, dict[str, SwimNode]]]:
    pki = SitePki.create([*SITES, "mallory"])
    nodes: dict[str, SwimNode] = {}
    try:
        for site in SITES:
            seeds = [nodes["east"].address] if nodes else []
            nodes[site] = await SwimNode.start(
                site, "127.0.0.1:0", Keyring(KEY), config=FAST, seeds=seeds,
                replica=pki.replica(site),
            )  # fmt: skip
        for site, node in nodes.items():
            assert node.replica is not None
            await node.publish(node.replica.item(site, Lane.CERT))
        yield pki, nodes
    finally:
        for node in nodes.values():
            await node.stop()


def _west_providers(node: SwimNode) -> dict[str, float]:
    assert node.replica is not None
    return {pid: r.observed_at for o, pid, r in node.replica.providers() if o == "west"}


def _forgeries(pki: SitePki) -> list[BroadcastItem]:
    mallory = pki.signer("mallory")
    evil_state = GridStateSnapshot.empty("west").put_provider("evil", _record("evil", 9.0))
    state = encode_lane(evil_state.state)
    return [
        BroadcastItem(Lane.STATE, "west", 2**62, os.urandom(200)),
        mallory.sign_item(BroadcastItem(Lane.STATE, "west", 2**62 + 1, state)),
        BroadcastItem(Lane.STATE, "west", 2**62 + 2, state),
        mallory.sign_item(
            BroadcastItem(Lane.GATEWAY, "west", 2**62, encode_lane(GatewayLaneValue("evil:1")))
        ),
        mallory.sign_item(
            BroadcastItem(Lane.CERT, "west", 2**62, encode_lane(pki.cert_lane("mallory")))
        ),
    ]


async def test_a_swim_key_holder_cannot_rewrite_another_sites_state(
    mesh: tuple[SitePki, dict[str, SwimNode]],
) -> None:
    pki, nodes = mesh
    west, others = nodes["west"], [nodes["east"], nodes["central"]]
    await west.write_local(lambda snap: snap.put_provider("vllm-west", _record("vllm-west", 1.0)))
    await eventually(
        lambda: all(_west_providers(n) == {"vllm-west": 1.0} for n in others),
        "east and central list west's provider",
        timeout_s=DEADLINE_S,
    )

    forged = _forgeries(pki)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
        for node in nodes.values():
            for item in forged:  # one item per datagram: each fits the 1,400-byte budget
                packet = seal(KEY, codec.encode_datagram(Gossip("mallory", items=(item,))))
                raw.sendto(packet, parse_address(node.address))
    for node in nodes.values():  # and all of them at once over TCP anti-entropy
        pushed = PushPull("mallory", (Alive("mallory", "127.0.0.1:9", 1),), tuple(forged))
        reply = await exchange(
            node.address, pushed, Keyring(KEY), TransportCounters(), PushPullSettings()
        )
        assert reply is not None

    def all_refused() -> bool:
        return all(
            n.replica is not None and sum(n.replica.counters.dropped.values()) >= 2 * len(forged)
            for n in others
        )

    await eventually(all_refused, "every forged item is refused and counted", timeout_s=DEADLINE_S)
    for node in others:
        assert node.replica is not None
        dropped = node.replica.counters.dropped
        # Per path (UDP, TCP): mallory's two signatures, the garbage and the unsigned state
        # item, and mallory's certificate, which names mallory, not west.
        assert dropped["bad_signature"] >= 4, dropped
        assert dropped["unsigned"] >= 4, dropped
        assert dropped["cert_wrong_origin"] >= 2, dropped
        assert _west_providers(node) == {"vllm-west": 1.0}
        west_snap = node.replica.snapshot("west")
        assert west_snap is not None and west_snap.gateway.egress_address == ""
        assert west_snap.revision(Lane.STATE) < 2**62
        held = node.machine.known_items()
        assert not any(i.origin == "west" and i.revision >= 2**62 for i in held), held
    assert west.replica is not None and west.replica.local.revision(Lane.STATE) < 2**62

    # West is not silenced: its next write reaches everyone.
    await west.write_local(lambda snap: snap.put_provider("vllm-west", _record("vllm-west", 2.0)))
    await eventually(
        lambda: all(_west_providers(n) == {"vllm-west": 2.0} for n in others),
        "west's next write arrives everywhere",
        timeout_s=DEADLINE_S,
    )
