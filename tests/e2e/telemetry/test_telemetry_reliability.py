"""Reliability of the admission gateway as a real process: kill -9, backbone outages.

An ACK must mean the batch survives ``kill -9`` of the gateway, and nothing may
be acknowledged while the backbone is down. Clients stream batches over real
mTLS; the tests then read the backbone back with ``grid telemetry records``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import pytest

from grid.proto_gen.grid.telemetry.v1 import telemetry_pb2 as pb
from grid.telemetry.client import (
    ClientSettings,
    HttpsTransport,
    OutboundRecord,
    TelemetryClient,
    encode_batch,
)
from grid.testing.nats_server import NatsServer
from grid.testing.poll import eventually

from .conftest import Gateways, Pki, admit_agents, stored

pytestmark = pytest.mark.e2e

STREAMS = 4
BATCH_EVENTS = 100
BATCHES_MAX = 300
"""Upper bound per stream; the streams normally end much earlier, at the kill."""
ACKS_BEFORE_KILL = 20
FAST = {"rate_per_agent_rps": 100000, "burst_per_agent": 100000}


def _batch(agent: str, n: int) -> list[OutboundRecord]:
    now = dt.datetime.now(dt.UTC)
    return [
        OutboundRecord("events", f"{agent}/{n}/{i}", now, "load", {"i": str(i)}, b"x" * 32)
        for i in range(BATCH_EVENTS)
    ]


async def _no_sleep(seconds: float) -> None:
    del seconds


def _transport(pki: Pki, index: int, address: str) -> HttpsTransport:
    _, cert, key = pki.agents[index]
    return HttpsTransport(address, cert=cert, key=key, ca=pki.ca, timeout_s=5.0)


class Stream:
    """One agent sending batch after batch until the gateway stops answering."""

    def __init__(self, pki: Pki, index: int, address: str) -> None:
        self.agent = pki.agents[index][0]
        self.transport = _transport(pki, index, address)
        self.acked: dict[str, set[str]] = {}
        self.retained: list[OutboundRecord] = []

    def _on_ack(self, batch_id: str, accepted: int, records: list[OutboundRecord]) -> None:
        assert accepted == len(records)
        self.acked.setdefault(batch_id, set()).update(r.record_id for r in records)

    async def run(self) -> None:
        client = TelemetryClient(
            self.transport, ClientSettings(attempts_max=1), sleep=_no_sleep, on_ack=self._on_ack
        )
        try:
            for n in range(BATCHES_MAX):
                report = await client.send(_batch(self.agent, n))
                if report.retained:
                    self.retained = report.retained_records
                    return
        finally:
            await self.transport.close()


def _by_batch(rows: list[dict[str, object]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for row in rows:
        out.setdefault(str(row["batch_id"]), set()).add(str(row["record_id"]))
    return out


@pytest.mark.parametrize("kind", ["sqlite", "nats"])
async def test_sigkill_mid_stream_loses_no_acknowledged_record(
    kind: str, pki: Pki, gateways: Gateways, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    backbone = request.getfixturevalue("nats").url if kind == "nats" else "sqlite"
    data_dir = tmp_path / "data"
    agents = [pki.agents[i][0] for i in range(STREAMS)]
    await admit_agents(backbone, data_dir, agents)
    gateway = await gateways.start(data_dir, backbone, **FAST)
    streams = [Stream(pki, i, gateway.address) for i in range(STREAMS)]
    tasks = [asyncio.create_task(s.run()) for s in streams]

    await eventually(
        lambda: sum(len(s.acked) for s in streams) >= ACKS_BEFORE_KILL,
        f"{ACKS_BEFORE_KILL} acks before the kill",
        timeout_s=30,
    )
    await gateway.kill()
    await asyncio.wait_for(asyncio.gather(*tasks), 30)

    acked = {b: ids for s in streams for b, ids in s.acked.items()}
    assert any(s.retained for s in streams), "the kill did not interrupt the stream"
    durable = _by_batch(await stored(backbone, data_dir))
    missing = {b: ids - durable.get(b, set()) for b, ids in acked.items()}
    assert not any(missing.values()), f"acknowledged but not durable: {missing}"

    # The retained records go through once the gateway is back: nothing is lost.
    again = await gateways.start(data_dir, backbone, **FAST)
    transport = _transport(pki, 0, again.address)
    try:
        retained = [r for s in streams for r in s.retained]
        report = await TelemetryClient(transport, sleep=_no_sleep).send(retained)
    finally:
        await transport.close()
    assert not report.retained
    everything = {r for ids in _by_batch(await stored(backbone, data_dir)).values() for r in ids}
    sent = {r for ids in acked.values() for r in ids} | {r.record_id for r in retained}
    assert sent <= everything


async def _post(transport: HttpsTransport, records: list[OutboundRecord]) -> tuple[int, str, str]:
    """(status, batch_id or refusal code, Retry-After) for one raw POST."""
    body = encode_batch("events", records)
    headers = {"Content-Type": "application/x-protobuf"}
    response = await transport.post("/v1/events", body, headers)
    if response.status == 200:
        return 200, pb.Ack.FromString(response.body).batch_id, ""
    code = pb.Refusal.FromString(response.body).code
    return response.status, code, response.headers.get("Retry-After", "")


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
async def test_backbone_down_means_only_503_and_no_ack_then_recovery(
    how: str, pki: Pki, gateways: Gateways, nats: NatsServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    agent = pki.agents[0][0]
    await admit_agents(nats.url, data_dir, [agent])
    gateway = await gateways.start(data_dir, nats.url, publish_budget_s=3, **FAST)
    transport = _transport(pki, 0, gateway.address)
    acked: list[str] = []
    n = 0
    try:
        for _ in range(3):
            status, batch_id, _ = await _post(transport, _batch(agent, n := n + 1))
            assert status == 200
            acked.append(batch_id)

        if how == "sigkill":
            nats.kill()
        else:
            nats.stop()
        for _ in range(5):
            status, code, retry_after = await _post(transport, _batch(agent, n := n + 1))
            assert (status, code) == (503, "backbone_unavailable")
            assert int(retry_after) >= 1

        nats.start()

        async def accepted() -> str | None:
            nonlocal n
            status, got, _ = await _post(transport, _batch(agent, n := n + 1))
            assert status == 200 or (status, got) == (503, "backbone_unavailable")
            return got if status == 200 else None

        acked.append(
            await eventually(accepted, "the stream recovers", timeout_s=20, interval_s=0.1)
        )
        for _ in range(3):
            status, batch_id, _ = await _post(transport, _batch(agent, n := n + 1))
            assert status == 200
            acked.append(batch_id)
    finally:
        await transport.close()
    durable = _by_batch(await stored(nats.url, data_dir))
    assert all(len(durable.get(b, ())) == BATCH_EVENTS for b in acked)
