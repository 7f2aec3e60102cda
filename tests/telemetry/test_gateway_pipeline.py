"""The gateway over real mTLS: the six steps in seed order, refusals and ACK semantics."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from typing import Any

import aiohttp
import pytest

from grid.core.telemetry.refusals import REFUSALS
from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import (
    Ack,
    Event,
    InventoryRecord,
    Refusal,
)
from grid.testing.poll import eventually

from .conftest import AGENT_IDS, Harness, admit, events, inventory

JSON = {"Accept": "application/json"}


def _refusal(body: bytes) -> Refusal:
    return Refusal.FromString(body)


async def _raw_request(
    harness: Harness, agent: str, head: str, body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """Send raw request bytes (headers, optional partial body) and read one response."""
    _, port = harness.host_port
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=harness.client_context(agent), server_hostname="localhost"
    )
    try:
        writer.write(head.encode() + body)
        await writer.drain()
        async with asyncio.timeout(5):
            status_line = await reader.readline()
            headers: dict[str, str] = {}
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            payload = await reader.readexactly(int(headers.get("content-length", "0")))
        return int(status_line.split()[1]), headers, payload
    finally:
        writer.close()


def _head(route: str, content_length: int, content_type: str = "application/x-protobuf") -> str:
    return (
        f"POST /v1/{route} HTTP/1.1\r\nHost: localhost\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {content_length}\r\nAccept: application/json\r\n\r\n"
    )


async def test_admitted_agent_gets_an_ack_after_the_batch_is_published(start_gateway: Any) -> None:
    gw: Harness = await start_gateway()
    await admit(gw.roster, AGENT_IDS["cn"])
    status, headers, body = await gw.post("cn", "events", events(3).SerializeToString())
    assert status == 200, body
    ack = Ack.FromString(body)
    assert ack.accepted == 3 and ack.batch_id == gw.backbone.batches[0].batch_id
    assert headers["Content-Type"] == "application/x-protobuf" and headers["X-Request-Id"]


async def test_each_answer_is_counted_by_outcome_on_the_closed_label(start_gateway: Any) -> None:
    gw: Harness = await start_gateway()
    outcomes = gw.gateway.outcomes
    assert outcomes.allowed == {"accepted", *(r.code for r in REFUSALS)}
    await admit(gw.roster, AGENT_IDS["cn"])
    assert (await gw.post("cn", "events", events(2).SerializeToString()))[0] == 200
    gw.backbone.fail = True
    assert (await gw.post("cn", "events", events(1).SerializeToString()))[0] == 503
    assert outcomes.value("accepted") == 1 and outcomes.value("backbone_unavailable") == 1
    assert outcomes.value("invalid_batch") == 0


async def test_ack_is_sent_only_after_the_durable_receipt(start_gateway: Any) -> None:
    gw: Harness = await start_gateway()
    await admit(gw.roster, AGENT_IDS["cn"])
    gw.backbone.gate = asyncio.Event()
    body = events(1).SerializeToString()
    request = asyncio.create_task(gw.post("cn", "events", body))
    await asyncio.wait_for(gw.backbone.publishing.wait(), 5)
    # The held publication then fails. An ACK sent before the receipt would already
    # be the answer on the wire; the only answer consistent with the receipt is 503.
    gw.backbone.fail = True
    gw.backbone.gate.set()
    status, _, refused = await request
    assert (status, _refusal(refused).code) == (503, "backbone_unavailable")
    assert gw.backbone.batches == []
    gw.backbone.fail = False
    status, _, _ = await gw.post("cn", "events", body)
    assert status == 200 and len(gw.backbone.batches) == 1


async def test_backbone_failure_is_503_with_retry_after_and_nothing_acknowledged(
    start_gateway: Any,
) -> None:
    gw: Harness = await start_gateway(backbone_retry_after_s=3)
    await admit(gw.roster, AGENT_IDS["cn"])
    gw.backbone.fail = True
    status, headers, body = await gw.post("cn", "events", events(2).SerializeToString())
    refusal = _refusal(body)
    assert (status, refusal.code, refusal.retry_after_seconds) == (503, "backbone_unavailable", 3)
    assert headers["Retry-After"] == "3" and gw.backbone.batches == []


async def test_publish_past_the_budget_is_backbone_unavailable(start_gateway: Any) -> None:
    gw: Harness = await start_gateway(publish_budget_s=0.1)
    await admit(gw.roster, AGENT_IDS["cn"])
    gw.backbone.gate = asyncio.Event()  # never opened
    status, headers, body = await gw.post("cn", "events", events(1).SerializeToString(), JSON)
    assert status == 503 and json.loads(body)["code"] == "backbone_unavailable"
    assert "Retry-After" in headers and gw.backbone.batches == []


@pytest.mark.parametrize(
    ("agent", "states", "code"),
    [
        ("stranger", [], "agent_not_registered"),
        ("cn", ["registered"], "agent_not_admitted"),
        ("cn", ["registered", "admitted", "suspended"], "agent_not_admitted"),
        ("cn", ["registered", "admitted", "revoked"], "agent_not_admitted"),
    ],
)
async def test_roster_states_decide_admission(
    start_gateway: Any, agent: str, states: list[str], code: str
) -> None:
    gw: Harness = await start_gateway()
    for state in states:
        await gw.roster.append(AGENT_IDS["cn"], state, "tenant-1")
    status, headers, body = await gw.post(agent, "events", events(1).SerializeToString(), JSON)
    assert (status, json.loads(body)["code"]) == (403, code)
    assert "Retry-After" not in headers


async def test_unknown_agent_with_wrong_content_type_is_not_registered(start_gateway: Any) -> None:
    gw: Harness = await start_gateway()
    status, _, body = await gw.post(
        "stranger", "events", b"{}", {"Content-Type": "application/json"}
    )
    assert (status, _refusal(body).code) == (403, "agent_not_registered")


async def test_content_type_is_checked_for_admitted_agents(start_gateway: Any) -> None:
    gw: Harness = await start_gateway()
    await admit(gw.roster, AGENT_IDS["cn"])
    status, _, body = await gw.post("cn", "events", b"{}", {"Content-Type": "application/json"})
    assert (status, _refusal(body).code) == (415, "unsupported_content_type")


async def test_rate_limited_agent_with_a_huge_content_length_is_rate_limited(
    start_gateway: Any,
) -> None:
    gw: Harness = await start_gateway(burst_per_agent=1, rate_per_agent_rps=0.5)
    await admit(gw.roster, AGENT_IDS["cn"])
    assert (await gw.post("cn", "events", events(1).SerializeToString()))[0] == 200
    status, headers, body = await _raw_request(gw, "cn", _head("events", 10**12))
    assert (status, json.loads(body)["code"]) == (429, "rate_limited")
    assert int(headers["retry-after"]) >= 1


async def test_inventory_shares_the_agents_token_bucket(start_gateway: Any) -> None:
    gw: Harness = await start_gateway(burst_per_agent=2, rate_per_agent_rps=0.01)
    await admit(gw.roster, AGENT_IDS["cn"])
    assert (await gw.post("cn", "events", events(1).SerializeToString()))[0] == 200
    assert (await gw.post("cn", "inventory", inventory(1).SerializeToString()))[0] == 200
    status, headers, body = await gw.post("cn", "inventory", inventory(1).SerializeToString())
    assert (status, _refusal(body).code) == (429, "rate_limited") and "Retry-After" in headers


async def test_capacity_is_reserved_from_content_length_before_the_body_is_read(
    start_gateway: Any,
) -> None:
    gw: Harness = await start_gateway(held_body_bytes_max=1000, capacity_retry_after_s=2)
    await admit(gw.roster, AGENT_IDS["cn"])
    # No body byte is ever sent: the answer can only come from the headers.
    status, headers, body = await _raw_request(gw, "cn", _head("events", 1001))
    assert (status, json.loads(body)["code"], headers["retry-after"]) == (
        503,
        "gateway_at_capacity",
        "2",
    )
    assert gw.gateway.admission.capacity.held_body_bytes == 0


async def test_held_bodies_count_against_the_aggregate_until_answered(start_gateway: Any) -> None:
    body = events(1).SerializeToString()
    gw: Harness = await start_gateway(held_body_bytes_max=len(body) + 10)
    await admit(gw.roster, AGENT_IDS["cn"])
    await admit(gw.roster, AGENT_IDS["other"])
    gw.backbone.gate = asyncio.Event()
    first = asyncio.create_task(gw.post("cn", "events", body))
    await asyncio.wait_for(gw.backbone.publishing.wait(), 5)
    status, _, refusal = await gw.post("other", "events", body)
    assert (status, _refusal(refusal).code) == (503, "gateway_at_capacity")
    gw.backbone.gate.set()
    assert (await first)[0] == 200
    assert (await gw.post("other", "events", body))[0] == 200


async def test_request_count_is_bounded(start_gateway: Any) -> None:
    gw: Harness = await start_gateway(requests_in_flight_max=1)
    await admit(gw.roster, AGENT_IDS["cn"])
    await admit(gw.roster, AGENT_IDS["other"])
    gw.backbone.gate = asyncio.Event()
    first = asyncio.create_task(gw.post("cn", "events", events(1).SerializeToString()))
    await asyncio.wait_for(gw.backbone.publishing.wait(), 5)
    status, _, _ = await gw.post("other", "events", events(1).SerializeToString())
    assert status == 503
    gw.backbone.gate.set()
    assert (await first)[0] == 200


async def test_declared_body_over_the_limit_is_413_without_reading(start_gateway: Any) -> None:
    gw: Harness = await start_gateway(request_body_bytes_max=100)
    await admit(gw.roster, AGENT_IDS["cn"])
    status, _, body = await _raw_request(gw, "cn", _head("events", 101))
    assert (status, json.loads(body)["code"]) == (413, "batch_body_too_large")


async def test_chunked_body_over_the_limit_is_413(start_gateway: Any) -> None:
    gw: Harness = await start_gateway(request_body_bytes_max=100)
    await admit(gw.roster, AGENT_IDS["cn"])

    async def chunks() -> Any:
        for _ in range(5):
            yield b"x" * 50

    status, _, body = await gw.post("cn", "events", chunks())  # type: ignore[arg-type]
    assert (status, _refusal(body).code) == (413, "batch_body_too_large")


async def test_too_many_events_or_inventory_records_is_413(start_gateway: Any) -> None:
    gw: Harness = await start_gateway()
    await admit(gw.roster, AGENT_IDS["cn"])
    status, _, body = await gw.post("cn", "events", events(1001).SerializeToString())
    assert (status, _refusal(body).code) == (413, "batch_body_too_large")
    status, _, body = await gw.post("cn", "inventory", inventory(65).SerializeToString())
    assert (status, _refusal(body).code) == (413, "batch_body_too_large")
    assert gw.backbone.batches == []


@pytest.mark.parametrize("field", ["protocol_version", "schema_version"])
async def test_unsupported_versions_are_400(start_gateway: Any, field: str) -> None:
    gw: Harness = await start_gateway()
    await admit(gw.roster, AGENT_IDS["cn"])
    batch = events(1)
    setattr(batch, field, 9)
    status, _, body = await gw.post("cn", "events", batch.SerializeToString())
    assert (status, _refusal(body).code) == (400, "unsupported_protocol_version")


async def test_one_invalid_record_refuses_the_whole_batch(start_gateway: Any) -> None:
    gw: Harness = await start_gateway()
    await admit(gw.roster, AGENT_IDS["cn"])
    batch = events(5)
    batch.events[3].type = ""
    status, _, body = await gw.post("cn", "events", batch.SerializeToString(), JSON)
    refusal = json.loads(body)
    assert (status, refusal["code"]) == (400, "invalid_batch") and "record 3" in refusal["message"]
    assert gw.backbone.batches == []
    status, _, body = await gw.post("cn", "events", b"\x0a\xff\xff", JSON)
    assert (status, json.loads(body)["code"]) == (400, "invalid_batch")


async def test_old_or_future_observations_are_refused_not_retimestamped(start_gateway: Any) -> None:
    now_ns = 1_800_000_000 * 10**9
    gw: Harness = await start_gateway(wall_ns=lambda: now_ns)
    await admit(gw.roster, AGENT_IDS["cn"])
    old = events(1, observed_ns=now_ns - 8 * 24 * 3600 * 10**9)
    ahead = events(1, observed_ns=now_ns + 301 * 10**9)
    for batch in (old, ahead):
        status, _, body = await gw.post("cn", "events", batch.SerializeToString())
        assert (status, _refusal(body).code) == (400, "invalid_batch")
    edge = events(1, observed_ns=now_ns - 6 * 24 * 3600 * 10**9)
    assert (await gw.post("cn", "events", edge.SerializeToString()))[0] == 200
    stored = Event.FromString(gw.backbone.batches[0].records[0].encoded)
    assert stored.observed_at == edge.events[0].observed_at


async def test_origin_and_reception_are_stamped_over_client_values(start_gateway: Any) -> None:
    now_ns = time.time_ns()
    gw: Harness = await start_gateway(wall_ns=lambda: now_ns)
    await admit(gw.roster, AGENT_IDS["cn"], tenant="tenant-x")
    batch = inventory(1)
    record = batch.records[0]
    record.origin.agent_id, record.origin.tenant_id = "spoofed", "spoofed-tenant"
    record.reception.gateway_id, record.reception.request_id = "spoofed-gw", "spoofed-req"
    status, headers, _ = await gw.post("cn", "inventory", batch.SerializeToString())
    assert status == 200
    stored = InventoryRecord.FromString(gw.backbone.batches[0].records[0].encoded)
    assert (stored.origin.agent_id, stored.origin.tenant_id) == ("cn-agent", "tenant-x")
    assert stored.reception.gateway_id == "gw-test"
    assert stored.reception.request_id == headers["X-Request-Id"]
    assert stored.reception.received_at.ToNanoseconds() == now_ns


@pytest.mark.parametrize("agent", ["spiffe", "cn"])
async def test_identity_is_the_spiffe_uri_san_else_the_cn(start_gateway: Any, agent: str) -> None:
    gw: Harness = await start_gateway()
    await admit(gw.roster, AGENT_IDS[agent])
    assert (await gw.post(agent, "events", events(1).SerializeToString()))[0] == 200
    stored = Event.FromString(gw.backbone.batches[0].records[0].encoded)
    assert stored.origin.agent_id == AGENT_IDS[agent]


async def test_spiffe_agent_is_not_known_by_its_cn(start_gateway: Any) -> None:
    gw: Harness = await start_gateway()
    await admit(gw.roster, "ignored-cn")
    status, _, body = await gw.post("spiffe", "events", events(1).SerializeToString())
    assert (status, _refusal(body).code) == (403, "agent_not_registered")


async def test_a_roster_change_reaches_a_running_gateway(start_gateway: Any) -> None:
    gw: Harness = await start_gateway()
    body = events(1).SerializeToString()
    assert (await gw.post("cn", "events", body))[0] == 403

    async def answers(status: int, body: bytes) -> bool:
        return (await gw.post("cn", "events", body))[0] == status

    await admit(gw.roster, AGENT_IDS["cn"])
    await eventually(lambda: answers(200, body), "the admission reaches the gateway", timeout_s=1)
    await gw.roster.append(AGENT_IDS["cn"], "suspended", None)
    suspended = events(2).SerializeToString()
    await eventually(lambda: answers(403, suspended), "the suspension reaches it", timeout_s=1)


async def test_roster_is_replayed_before_the_listener_opens(start_gateway: Any) -> None:
    from .conftest import MemoryRosterLog

    roster = MemoryRosterLog()
    await admit(roster, AGENT_IDS["cn"])
    gw: Harness = await start_gateway(roster=roster)
    assert gw.gateway.admission.roster.admit(AGENT_IDS["cn"]) == "tenant-1"
    assert (await gw.post("cn", "events", events(1).SerializeToString()))[0] == 200


async def test_a_byte_identical_retry_gets_the_same_batch_id(start_gateway: Any) -> None:
    gw: Harness = await start_gateway()
    await admit(gw.roster, AGENT_IDS["cn"])
    body = events(2).SerializeToString()
    first = Ack.FromString((await gw.post("cn", "events", body))[2])
    again = Ack.FromString((await gw.post("cn", "events", body))[2])
    assert first == again and len(gw.backbone.batches) == 1


async def test_a_client_without_a_certificate_is_refused_by_the_handshake(
    start_gateway: Any,
) -> None:
    gw: Harness = await start_gateway()
    context = ssl.create_default_context(cafile=str(gw.pki.ca))
    _, port = gw.host_port
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.post(
                f"https://localhost:{port}/v1/events",
                data=events(1).SerializeToString(),
                headers={"Content-Type": "application/x-protobuf"},
            ) as response:
                await response.read()
    assert gw.backbone.batches == []


async def test_expect_continue_invites_the_body_only_after_admission(start_gateway: Any) -> None:
    gw: Harness = await start_gateway()
    await admit(gw.roster, AGENT_IDS["cn"])
    body = events(2).SerializeToString()
    head = _head("events", len(body)).replace("\r\n\r\n", "\r\nExpect: 100-continue\r\n\r\n")

    # Refused at step 2: the final answer comes at once, with no invitation first.
    status, _, refusal = await _raw_request(gw, "stranger", head)
    assert (status, json.loads(refusal)["code"]) == (403, "agent_not_registered")

    _, port = gw.host_port
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=gw.client_context("cn"), server_hostname="localhost"
    )
    try:
        writer.write(head.encode())
        async with asyncio.timeout(5):
            assert (await reader.readline()).startswith(b"HTTP/1.1 100")
            assert await reader.readline() == b"\r\n"
            writer.write(body)
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
    assert len(gw.backbone.batches) == 1
