"""Refused bodies are not read, and malformed requests get a Refusal, on real mTLS sockets."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import Refusal
from grid.testing.hostile_clients import exchange, push_body, reset_mid_body
from grid.testing.poll import eventually

from .conftest import AGENT_IDS, Harness, admit

KIB = 1024
AFTER_REFUSAL_MAX = 64 * KIB
CHUNK = b"4000\r\n" + b"x" * 16 * KIB + b"\r\n"  # one 16 KiB chunk of a chunked body


def _head(extra: str) -> bytes:
    return (
        "POST /v1/events HTTP/1.1\r\nHost: localhost\r\n"
        f"Content-Type: application/x-protobuf\r\n{extra}\r\n"
    ).encode()


PUSH_TRIES = 3
"""Pushes tried until one sees the answer. A client still sending when the server
closes can have the answer overtaken by the reset (the race lingering close exists
for); what the test measures is how much more the server takes once it answered."""


async def _push(harness: Harness, agent: str, head: bytes, chunk: bytes) -> Any:
    _, port = harness.host_port
    context = harness.client_context(agent)
    for _ in range(PUSH_TRIES):
        pushed = await asyncio.to_thread(push_body, port, head, chunk, context=context)
        if pushed.answer:
            break
    return pushed


async def test_an_endless_chunked_body_is_not_read_after_its_413(start_gateway: Any) -> None:
    harness = await start_gateway(request_body_bytes_max=256 * KIB)
    await admit(harness.roster, AGENT_IDS["cn"])
    pushed = await _push(harness, "cn", _head("Transfer-Encoding: chunked\r\n"), CHUNK)
    assert pushed.answer.startswith(b"HTTP/1.1 413"), pushed.answer[:100]
    assert pushed.closed
    assert pushed.sent_after_answer <= AFTER_REFUSAL_MAX, pushed.sent_after_answer


async def test_a_declared_10_gib_body_is_not_read(start_gateway: Any) -> None:
    harness = await start_gateway()
    await admit(harness.roster, AGENT_IDS["cn"])
    head = _head(f"Content-Length: {10 * 1024**3}\r\n")
    pushed = await _push(harness, "cn", head, b"x" * 16 * KIB)
    assert pushed.answer.startswith(b"HTTP/1.1 413"), pushed.answer[:100]
    assert pushed.closed
    assert pushed.sent_after_answer <= AFTER_REFUSAL_MAX, pushed.sent_after_answer


async def test_an_unadmitted_agents_8_mib_body_is_not_read_after_its_403(
    start_gateway: Any,
) -> None:
    harness = await start_gateway()
    head = _head(f"Content-Length: {8 * 1024 * 1024}\r\n")
    pushed = await _push(harness, "stranger", head, b"x" * 16 * KIB)
    assert pushed.answer.startswith(b"HTTP/1.1 403"), pushed.answer[:100]
    assert pushed.closed
    assert pushed.sent_after_answer <= AFTER_REFUSAL_MAX, pushed.sent_after_answer


def _refusal_of(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    message = Refusal()
    message.ParseFromString(body)
    return status, message.code


@pytest.mark.parametrize(
    "header",
    [
        f"Content-Length: {2**64}",
        "Content-Length: -5",
        "Authorization: Bearer sk-planted-secret\x01",
    ],
)
async def test_a_malformed_request_gets_a_refusal_and_logs_no_header(
    start_gateway: Any, header: str, caplog: pytest.LogCaptureFixture, capfd: Any
) -> None:
    harness = await start_gateway()
    await admit(harness.roster, AGENT_IDS["cn"])
    _, port = harness.host_port
    caplog.set_level(logging.DEBUG)
    request = _head(header + "\r\n")
    answer = await asyncio.to_thread(exchange, port, request, context=harness.client_context("cn"))
    assert _refusal_of(answer) == (400, "invalid_batch")  # and then the server closed
    out, err = capfd.readouterr()
    for text in (out, err, caplog.text):
        assert "sk-planted" not in text and "Traceback" not in text
        assert str(2**64) not in text
    assert all(record.exc_info is None for record in caplog.records)
    refused = [r for r in caplog.records if r.name == "grid.http"]
    assert [getattr(r, "reason", None) for r in refused] in (
        ["malformed_request"],
        ["invalid_header"],
    )


async def test_a_reset_in_the_middle_of_a_body_logs_nothing(
    start_gateway: Any, caplog: pytest.LogCaptureFixture, capfd: Any
) -> None:
    harness = await start_gateway()
    await admit(harness.roster, AGENT_IDS["cn"])
    _, port = harness.host_port
    caplog.set_level(logging.DEBUG)
    head = _head("Content-Length: 100000\r\nExpect: 100-continue\r\n")
    await asyncio.to_thread(
        reset_mid_body, port, head, b"x" * 5000, context=harness.client_context("cn")
    )
    await eventually(lambda: harness.gateway.connections.total == 0, "the reset connection gone")
    _, err = capfd.readouterr()
    assert "Traceback" not in err and "Traceback" not in caplog.text
    assert all(record.exc_info is None for record in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
