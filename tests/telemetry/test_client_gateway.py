"""The client against the real gateway over mTLS on 127.0.0.1, in process and as `grid`."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import sys
from pathlib import Path
from typing import Any

from grid.cli.telemetry_send import load_records, record_line
from grid.proto_gen.grid.telemetry.v1 import telemetry_pb2 as pb
from grid.telemetry.client import (
    ClientSettings,
    HttpsTransport,
    OutboundRecord,
    TelemetryClient,
)
from grid.testing.poll import eventually

from .conftest import AGENT_IDS, Pki, admit


def _records(events: int, inventory: int) -> list[OutboundRecord]:
    now = dt.datetime.now(dt.UTC)
    out = [
        OutboundRecord("events", f"e{i}", now, "cpu", {"n": str(i)}, b"p") for i in range(events)
    ]
    out += [OutboundRecord("inventory", f"i{i}", now, "host") for i in range(inventory)]
    return out


def _transport(pki: Pki, agent: str, address: str) -> HttpsTransport:
    cert, key = pki.agents[agent]
    return HttpsTransport(address, cert=cert, key=key, ca=pki.ca)


def _pooled_alive(transport: HttpsTransport) -> bool:
    """Whether the transport's connection pool still holds a live connection."""
    session = transport._session
    if session is None:
        return False
    pool = session.connector._conns  # type: ignore[union-attr]
    return any(proto.is_connected() for conns in pool.values() for proto, _ in conns)


async def _no_sleep(seconds: float) -> None:
    del seconds


async def test_every_record_is_acknowledged_and_stamped(pki: Pki, start_gateway: Any) -> None:
    harness = await start_gateway()
    await admit(harness.roster, AGENT_IDS["cn"])
    transport = _transport(pki, "cn", harness.gateway.address)
    try:
        report = await TelemetryClient(transport).send(_records(2100, 70))
    finally:
        await transport.close()
    assert report.acknowledged_records == 2170 and not report.retained
    assert len(report.acknowledged) == 5  # 1000 + 1000 + 100 events, 64 + 6 inventory
    stored = [item async for item in harness.backbone.records()]
    assert sorted(r.record_id for _, _, r in stored) == sorted(
        [f"e{i}" for i in range(2100)] + [f"i{i}" for i in range(70)]
    )
    first = pb.Event.FromString(stored[0][2].encoded)
    assert first.origin.agent_id == AGENT_IDS["cn"] and first.origin.tenant_id == "tenant-1"
    assert {batch_id for batch_id, _ in report.acknowledged} == {b for b, _, _ in stored}


async def test_unregistered_agent_keeps_every_record(pki: Pki, start_gateway: Any) -> None:
    harness = await start_gateway()
    transport = _transport(pki, "other", harness.gateway.address)
    records = _records(1500, 0)
    try:
        report = await TelemetryClient(transport).send(records)
    finally:
        await transport.close()
    assert report.retained_records == records
    assert report.retained[0].code == "agent_not_registered"


async def test_backbone_outage_is_ridden_out_without_losing_records(
    pki: Pki, start_gateway: Any
) -> None:
    harness = await start_gateway()
    await admit(harness.roster, AGENT_IDS["cn"])
    harness.backbone.fail = True
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            harness.backbone.fail = False

    transport = _transport(pki, "cn", harness.gateway.address)
    client = TelemetryClient(transport, rng=random.Random(3), sleep=sleep)
    try:
        report = await client.send(_records(10, 0))
    finally:
        await transport.close()
    assert report.acknowledged_records == 10
    assert report.refusals == {"backbone_unavailable": 3}
    assert all(s >= 2.0 for s in sleeps)  # the gateway's Retry-After (backbone_retry_after_s)
    assert len(harness.backbone.batches) == 1


async def _grid(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from grid.cli import main; main()",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_send_command_sends_files_and_writes_what_it_retains(
    pki: Pki, start_gateway: Any, tmp_path: Path
) -> None:
    harness = await start_gateway()
    await admit(harness.roster, AGENT_IDS["cn"])
    source = tmp_path / "records.jsonl"
    lines = [record_line(r) for r in _records(3, 2)]
    lines.insert(1, "# a comment")
    lines.append(json.dumps({"observed_at": dt.datetime.now(dt.UTC).isoformat(), "type": "t"}))
    source.write_text("\n".join(lines) + "\n")
    tls = ["--ca", str(pki.ca)]
    for agent, expected in (("cn", 0), ("other", 1)):
        cert, key = pki.agents[agent]
        retained = tmp_path / f"{agent}.retained.jsonl"
        code, out, err = await _grid(
            "telemetry", "send", "--gateway", harness.gateway.address, "--cert", str(cert),
            "--key", str(key), *tls, "--retain-to", str(retained), str(source),
        )  # fmt: skip
        assert code == expected, err
        summary = json.loads(out.splitlines()[-1])
        if expected == 0:
            assert summary["acknowledged_records"] == 6 and summary["retained_records"] == 0
            assert not retained.exists()
        else:
            assert summary["retained"][0]["code"] == "agent_not_registered"
            assert load_records([retained]) == load_records([source])
    assert sum(len(b.records) for b in harness.backbone.batches) == 6


async def test_large_refused_batch_reads_the_refusal_not_a_reset(
    pki: Pki, start_gateway: Any
) -> None:
    harness = await start_gateway(rate_per_agent_rps=0.01, burst_per_agent=1)
    await admit(harness.roster, AGENT_IDS["cn"])
    now = dt.datetime.now(dt.UTC)
    big = [OutboundRecord("events", f"b{i}", now, "blob", {}, b"z" * 2000) for i in range(400)]
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    transport = _transport(pki, "cn", harness.gateway.address)
    client = TelemetryClient(transport, ClientSettings(attempts_max=2), sleep=sleep)
    try:
        first = await client.send(big)
        second = await client.send(big)
    finally:
        await transport.close()
    assert first.acknowledged_records == 400
    assert second.refusals == {"rate_limited": 2}
    assert second.retained_records == big
    assert sleeps and sleeps[0] >= 99  # Retry-After of an agent refilling at 0.01 requests/s


async def test_the_client_reconnects_after_the_gateway_closed_an_idle_connection(
    pki: Pki, start_gateway: Any
) -> None:
    harness = await start_gateway(header_read_timeout_s=0.3, idle_timeout_s=0.3)
    await admit(harness.roster, AGENT_IDS["cn"])
    transport = _transport(pki, "cn", harness.gateway.address)
    client = TelemetryClient(transport, sleep=_no_sleep)
    try:
        first = await client.send(_records(1, 0))
        await eventually(
            lambda: not harness.gateway.connections.total, "the idle keep-alive connection closed"
        )
        # The gateway's side closes first; the client's pooled connection learns of it when
        # its own event-loop callback runs. Sending before that would test the retry, not
        # the reconnect.
        await eventually(lambda: not _pooled_alive(transport), "the client saw the close")
        second = await client.send(_records(2, 0))
    finally:
        await transport.close()
    assert first.acknowledged_records == 1 and second.acknowledged_records == 2
    assert second.attempts == 1 and not second.refusals
