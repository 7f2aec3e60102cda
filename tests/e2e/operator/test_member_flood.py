"""A SWIM-key holder floods a real operator with announced members.

The attack as an outside probe ran it on `grid demo`: 79 sealed Gossip
datagrams, sent in 0.2 s, announce 3,000 fake members at the address of a UDP
sink. Before members had to prove themselves, east's table grew to 2,999 alive
members, the fakes spread, west marked the real east dead within about 5 s,
east's GridSite went Left, and east's probes went mostly to the sink (2,324
datagrams in 60 s). Here the mesh is the demo's three real operators
(500 ms probe rounds); the window is `WINDOW_S` of wall time.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from typing import Any

import pytest

from grid.core.swim.messages import Alive, Gossip
from grid.core.wire import codec
from grid.core.wire.frame import seal
from grid.demo.mesh import DemoMesh
from grid.testing.poll import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

WINDOW_S = 20.0
"""Wall seconds watched after the flood: 40 probe rounds of the demo."""
FAKES = 3000
PER_DATAGRAM = 38


class Sink(asyncio.DatagramProtocol):
    """A UDP socket that never answers: it only counts what reaches it."""

    def __init__(self) -> None:
        self.datagrams = 0

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        self.datagrams += 1


async def _phase(look: Any, store_site: str, site: str) -> str:
    sites = await look.objects(store_site, "GridSite")
    return str((sites.get(site, {}).get("status") or {}).get("phase", ""))


async def _alive_members(look: Any, site: str) -> float | None:
    text = await look.operator_metrics(site) or ""
    found = re.search(r'^grid_swim_members\{state="alive"\} (\S+)$', text, re.M)
    return None if found is None else float(found[1])


async def _refused(look: Any, site: str) -> float:
    text = await look.operator_metrics(site) or ""
    found = re.findall(r'^grid_swim_members_refused_total\{reason="\w+"\} (\S+)$', text, re.M)
    return sum(float(value) for value in found)


async def test_3000_announced_fakes_leave_east_active_and_reflect_nothing(
    mesh: DemoMesh, look: Any
) -> None:
    async def east_active() -> bool:
        return all([await _phase(look, s, "east") == "Active" for s in ("west", "central")])

    await eventually(east_active, "west and central hold east Active", timeout_s=60.0)
    assert mesh.pki is not None
    key = mesh.pki.swim_key.read_bytes()
    loop = asyncio.get_running_loop()
    transport, sink = await loop.create_datagram_endpoint(Sink, local_addr=("127.0.0.1", 0))
    try:
        sink_port = transport.get_extra_info("sockname")[1]
        fakes = [Alive(f"fake-{i:04d}", f"127.0.0.1:{sink_port}", 0) for i in range(FAKES)]
        packets = [
            seal(key, codec.encode_datagram(Gossip("mallory", updates=tuple(chunk))))
            for chunk in (fakes[i : i + PER_DATAGRAM] for i in range(0, FAKES, PER_DATAGRAM))
        ]
        assert len(packets) == 79
        east = ("127.0.0.1", mesh.plan.sites["east"].swim_port)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
            for packet in packets:
                raw.sendto(packet, east)
        await eventually(
            lambda: _refused(look, "east"), "east refuses the announcements", timeout_s=10.0
        )
        began = time.monotonic()
        largest = 0.0
        while time.monotonic() - began < WINDOW_S:  # a window watched, not a wait
            alive = await _alive_members(look, "east") or 0.0
            largest = max(largest, alive)
            assert alive <= 2, f"east's table holds {alive} alive members"
            assert await east_active(), "a peer stopped holding east Active"
            await asyncio.sleep(0.5)
        print(
            f"{FAKES} fakes: east's table at most {largest:.0f} alive members, "
            f"{sink.datagrams} datagrams to the sink in {WINDOW_S:.0f} s, east stays Active"
        )
        assert sink.datagrams <= 2 * 2  # two challenges, maybe one retry after the cool-down
        for site in ("west", "central"):
            assert (await _alive_members(look, site) or 0.0) <= 2, site
    finally:
        transport.close()
