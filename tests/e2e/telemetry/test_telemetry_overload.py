"""300 concurrent agents with distinct certificates: only the configured refusals, never a 500."""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
from pathlib import Path

import aiohttp
import pytest

from grid.proto_gen.grid.telemetry.v1 import telemetry_pb2 as pb
from grid.telemetry.client import OutboundRecord, encode_batch

from .conftest import AGENT_COUNT, Gateways, Pki, admit_agents

pytestmark = pytest.mark.e2e

REQUESTS_PER_AGENT = 2


async def _agent(pki: Pki, index: int, address: str, body: bytes) -> list[tuple[int, str]]:
    connector = aiohttp.TCPConnector(ssl=pki.client_context(index))
    timeout = aiohttp.ClientTimeout(total=60)
    answers = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for _ in range(REQUESTS_PER_AGENT):
            async with session.post(
                f"https://{address}/v1/events",
                data=body,
                headers={"Content-Type": "application/x-protobuf"},
            ) as response:
                raw = await response.read()
                code = "" if response.status == 200 else pb.Refusal.FromString(raw).code
                if response.status in (429, 503):
                    assert int(response.headers["Retry-After"]) >= 1
                answers.append((response.status, code))
    return answers


CONFIGS = {
    # One request per agent fits its bucket (burst 1): the second is rate limited. At
    # most 4 requests are admitted at once, so the simultaneous first requests of 300
    # agents also meet gateway_at_capacity.
    "rate_and_capacity": (
        {"requests_in_flight_max": 4, "rate_per_agent_rps": 0.01, "burst_per_agent": 1},
        {(429, "rate_limited"), (503, "gateway_at_capacity")},
    ),
    # Capacity is the only bound: no agent is ever rate limited.
    "capacity_only": (
        {"requests_in_flight_max": 4, "rate_per_agent_rps": 1000, "burst_per_agent": 1000},
        {(503, "gateway_at_capacity")},
    ),
    # The rate is the only bound: room for every request at once, none refused for capacity.
    "rate_only": (
        {"requests_in_flight_max": 1000, "rate_per_agent_rps": 0.01, "burst_per_agent": 1},
        {(429, "rate_limited")},
    ),
}


@pytest.mark.parametrize("config", list(CONFIGS))
async def test_300_agents_get_only_acks_and_the_configured_refusals(
    config: str, pki: Pki, gateways: Gateways, tmp_path: Path
) -> None:
    settings, refusals = CONFIGS[config]
    data_dir = tmp_path / "data"
    await admit_agents("sqlite", data_dir, [a for a, _, _ in pki.agents])
    # 300 agents open their TLS connections from one event loop at once; on a loaded
    # machine the last handshakes can start seconds after accept. The header deadline
    # has its own tests; here it must not be what refuses a connection.
    gateway = await gateways.start(data_dir, "sqlite", header_read_timeout_s=60, **settings)
    now = dt.datetime.now(dt.UTC)
    records = [OutboundRecord("events", f"r{i}", now, "load", {}, b"y" * 64) for i in range(50)]
    body = encode_batch("events", records)
    answers = await asyncio.gather(
        *(_agent(pki, i, gateway.address, body) for i in range(AGENT_COUNT))
    )
    seen = collections.Counter(a for agent in answers for a in agent)
    assert set(seen) == {(200, "")} | refusals, seen
    assert sum(seen.values()) == AGENT_COUNT * REQUESTS_PER_AGENT
