"""Hostile bytes and hostile HTTP against the gateway process: only defined refusals.

Malformed Protobuf, wrong content types, a huge declared Content-Length, bodies
that trickle in or stall (slowloris) and chunked bodies past the limit must each
get one of the refusals of SPEC-DECISIONS §8, never a 500 or a hang, and the
gateway must keep serving afterwards.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import time
from pathlib import Path

import aiohttp
import pytest

from grid.proto_gen.grid.telemetry.v1 import telemetry_pb2 as pb
from grid.telemetry.client import OutboundRecord, encode_batch

from .conftest import GatewayProcess, Gateways, Pki, admit_agents

pytestmark = pytest.mark.e2e

BODY_LIMIT = 64 * 1024
READ_BUDGET_S = 2.0
SEED = 4004
DEFINED = {
    (400, "invalid_batch"),
    (400, "unsupported_protocol_version"),
    (413, "batch_body_too_large"),
    (415, "unsupported_content_type"),
}


def _valid_body(count: int = 5) -> bytes:
    now = dt.datetime.now(dt.UTC)
    records = [OutboundRecord("events", f"f{i}", now, "t", {"a": "b"}, b"p") for i in range(count)]
    return encode_batch("events", records)


def _mutations(rng: random.Random, valid: bytes, count: int) -> list[bytes]:
    bodies = [b"", b"\x00", b"\xff" * 64, valid[: len(valid) // 2]]
    for _ in range(count):
        choice = rng.randrange(3)
        if choice == 0:
            bodies.append(rng.randbytes(rng.randrange(1, 400)))
        elif choice == 1:
            body = bytearray(valid)
            for _ in range(rng.randrange(1, 6)):
                body[rng.randrange(len(body))] = rng.randrange(256)
            bodies.append(bytes(body))
        else:
            cut = rng.randrange(1, len(valid))
            bodies.append(valid[:cut] + rng.randbytes(rng.randrange(0, 20)))
    return bodies


async def _start(pki: Pki, gateways: Gateways, tmp_path: Path) -> GatewayProcess:
    data_dir = tmp_path / "data"
    await admit_agents("sqlite", data_dir, [pki.agents[0][0]])
    return await gateways.start(
        data_dir,
        "sqlite",
        request_body_bytes_max=BODY_LIMIT,
        body_read_budget_s=READ_BUDGET_S,
        rate_per_agent_rps=100000,
        burst_per_agent=100000,
    )


async def _post(
    session: aiohttp.ClientSession, address: str, body: bytes, content_type: str | None
) -> tuple[int, str]:
    headers = {"Content-Type": content_type} if content_type is not None else {}
    async with session.post(f"https://{address}/v1/events", data=body, headers=headers) as resp:
        raw = await resp.read()
        if resp.status == 200:
            return 200, "ack:" + pb.Ack.FromString(raw).batch_id
        assert resp.headers.get("Content-Type", "").startswith("application/x-protobuf"), raw
        return resp.status, pb.Refusal.FromString(raw).code


async def test_malformed_protobuf_and_wrong_content_types_get_defined_refusals(
    pki: Pki, gateways: Gateways, tmp_path: Path
) -> None:
    gateway = await _start(pki, gateways, tmp_path)
    rng = random.Random(SEED)
    valid = _valid_body()
    connector = aiohttp.TCPConnector(ssl=pki.client_context(0))
    async with aiohttp.ClientSession(connector=connector) as session:
        for i, body in enumerate(_mutations(rng, valid, 80)):
            status, code = await _post(session, gateway.address, body, "application/x-protobuf")
            assert (status, code) in DEFINED or status == 200, f"seed {SEED} body {i}: {code}"
        for content_type in ("text/plain", "application/json", "application/protobuf", None):
            answer = await _post(session, gateway.address, valid, content_type)
            assert answer == (415, "unsupported_content_type"), content_type
        status, code = await _post(session, gateway.address, valid, "application/x-protobuf")
        assert status == 200 and code.startswith("ack:")


async def _raw_exchange(
    pki: Pki, gateway: GatewayProcess, head: bytes, parts: list[bytes], gap_s: float = 0.0
) -> tuple[int, str, float]:
    """Send a hand-written request over mTLS; (status, refusal code, seconds to answer)."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", gateway.port, ssl=pki.client_context(0), server_hostname="localhost"
    )
    started = time.monotonic()

    async def feed() -> None:
        writer.write(head)
        for part in parts:
            writer.write(part)
            await writer.drain()
            if gap_s:
                await asyncio.sleep(gap_s)  # the trickle itself, not a wait for a condition

    feeder = asyncio.create_task(feed())
    try:
        response = await asyncio.wait_for(reader.read(1 << 16), READ_BUDGET_S + 5)
        elapsed = time.monotonic() - started
    finally:
        feeder.cancel()
        # The gateway may close while the feeder is still writing; that is expected.
        await asyncio.gather(feeder, return_exceptions=True)
        writer.close()
    head_bytes, _, body = response.partition(b"\r\n\r\n")
    status = int(head_bytes.split(b" ", 2)[1])
    return status, pb.Refusal.FromString(body).code, elapsed


def _head(extra: str) -> bytes:
    return (
        "POST /v1/events HTTP/1.1\r\nHost: localhost\r\n"
        f"Content-Type: application/x-protobuf\r\n{extra}\r\n"
    ).encode()


async def test_hostile_http_bodies_get_defined_refusals_in_bounded_time(
    pki: Pki, gateways: Gateways, tmp_path: Path
) -> None:
    gateway = await _start(pki, gateways, tmp_path)
    valid = _valid_body()
    chunk = b"x" * 16384
    chunked = [f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"] * 8 + [b"0\r\n\r\n"]
    cases = {
        "huge content-length": (_head("Content-Length: 10737418240\r\n"), [valid], 0.0),
        "over the limit": (_head(f"Content-Length: {BODY_LIMIT + 1}\r\n"), [valid], 0.0),
        "chunked over the limit": (_head("Transfer-Encoding: chunked\r\n"), chunked, 0.0),
        "stalled body": (_head("Content-Length: 500\r\n"), [valid[:10]], 0.0),
        "trickled body": (_head("Content-Length: 400\r\n"), [b"\x08"] * 20, 0.25),
    }
    expected = {
        "huge content-length": (413, "batch_body_too_large"),
        "over the limit": (413, "batch_body_too_large"),
        "chunked over the limit": (413, "batch_body_too_large"),
        "stalled body": (400, "invalid_batch"),
        "trickled body": (400, "invalid_batch"),
    }
    answers = await asyncio.gather(
        *(_raw_exchange(pki, gateway, head, parts, gap) for head, parts, gap in cases.values())
    )
    for name, (status, code, elapsed) in zip(cases, answers, strict=True):
        assert (status, code) == expected[name], name
        assert elapsed < READ_BUDGET_S + 3, name
    fine = await _raw_exchange(pki, gateway, _head(f"Content-Length: {len(valid)}\r\n"), [valid])
    assert fine[0] == 200
