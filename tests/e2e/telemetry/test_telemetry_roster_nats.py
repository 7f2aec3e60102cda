"""The roster in NATS KV: `grid telemetry roster` changes reach a running gateway within 1 s."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path

import pytest

from grid.proto_gen.grid.telemetry.v1 import telemetry_pb2 as pb
from grid.telemetry.client import HttpsTransport, OutboundRecord, encode_batch
from grid.testing.nats_server import NatsServer
from grid.testing.poll import eventually

from .conftest import GRID, Gateways, Pki

pytestmark = pytest.mark.e2e

PICKUP_S = 1.0
"""SPEC-DECISIONS §9: a running gateway picks a roster change up within 1 s."""


async def _roster(nats: NatsServer, *args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *GRID, "telemetry", "roster", *args, "--backbone", nats.url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()


async def _answer(transport: HttpsTransport) -> str:
    now = dt.datetime.now(dt.UTC)
    body = encode_batch("events", [OutboundRecord("events", "r", now, "t")])
    response = await transport.post("/v1/events", body, {"Content-Type": "application/x-protobuf"})
    return "ack" if response.status == 200 else pb.Refusal.FromString(response.body).code


async def _within_pickup(transport: HttpsTransport, expected: str) -> float:
    started = time.monotonic()

    async def answers() -> bool:
        return await _answer(transport) == expected

    await eventually(answers, f"the answer {expected}", timeout_s=PICKUP_S)
    return time.monotonic() - started


async def test_roster_commands_over_nats_reach_the_running_gateway_within_a_second(
    pki: Pki, gateways: Gateways, nats: NatsServer, tmp_path: Path
) -> None:
    agent, cert, key = pki.agents[7]
    gateway = await gateways.start(tmp_path / "data", nats.url)
    transport = HttpsTransport(gateway.address, cert=cert, key=key, ca=pki.ca)
    try:
        assert await _answer(transport) == "agent_not_registered"
        await _roster(nats, "add", agent, "--tenant", "tenant-7")
        await _within_pickup(transport, "agent_not_admitted")
        await _roster(nats, "admit", agent)
        await _within_pickup(transport, "ack")
        await _roster(nats, "suspend", agent)
        await _within_pickup(transport, "agent_not_admitted")
    finally:
        await transport.close()
