"""POST /v1/site/signals/ingest over real mTLS: every §7 header rule, refusal and answer."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from grid.core.signals.feedback import U64_MAX, Report, report_headers
from grid.operator.feedback_writer import FeedbackSettings

from .conftest import Pki
from .feedback_harness import Harness, no_echo, serving


def sites(pki: Pki) -> dict[str, tuple[Path, Path]]:
    return {name: (s.cert, s.key) for name, s in pki.sites.items()}


@pytest.fixture
async def endpoint(pki: Pki) -> AsyncIterator[Harness]:
    async with serving(pki.ca, sites(pki)) as harness:
        yield harness


def report(seq: int = 1, rejected: int = 0, clean: bool = True, epoch: int = 5) -> Report:
    return Report("gw-east.1", "east-0", epoch, seq, rejected, clean)


def headers(**overrides: str | None) -> list[tuple[str, str]]:
    base = report_headers(report())
    for key, value in overrides.items():
        name = "x-grid-ingest-" + key
        if value is None:
            base.pop(name)
        else:
            base[name] = value
    return list(base.items())


async def test_a_local_report_is_persisted_with_its_condition_then_echoed(
    endpoint: Harness,
) -> None:
    answer = await endpoint.post(report(seq=3))
    assert answer.status == 204 and answer.body is None
    assert answer.headers["x-grid-ingest-epoch"] == "5"
    assert answer.headers["x-grid-ingest-sequence"] == "3"
    status = await endpoint.status()
    (reporter,) = status["gatewayFeedback"]["reporters"]
    assert reporter["reporter"] == "gw-east.1" and reporter["sequence"] == "3"
    assert reporter["evidence"] is False and reporter["replica"] == "east-0"
    (condition,) = status["conditions"]
    assert condition["type"] == "GatewayIngest"
    assert (condition["status"], condition["reason"]) == ("True", "Clean")


async def test_a_counter_rise_claimed_clean_is_rejected_evidence_counted_per_reporter(
    endpoint: Harness,
) -> None:
    assert (await endpoint.post(report(seq=1))).status == 204
    assert (await endpoint.post(report(seq=2, rejected=1, clean=True))).status == 204
    other = Report("gw-east.2", "east-1", 1, 1, 0, False)
    assert (await endpoint.post(other)).status == 204
    status = await endpoint.status()
    condition = status["conditions"][0]
    assert (condition["status"], condition["reason"]) == ("False", "RejectedEvidence")
    assert condition["message"].startswith("2 ")
    assert status["gatewayFeedback"]["reportersWithEvidence"] == 2
    # A newer clean report with the same counter clears that reporter's evidence only.
    assert (await endpoint.post(report(seq=3, rejected=1, clean=True))).status == 204
    status = await endpoint.status()
    assert status["gatewayFeedback"]["reportersWithEvidence"] == 1
    assert status["conditions"][0]["message"].startswith("1 ")


async def test_an_exact_duplicate_answers_204_and_writes_nothing(endpoint: Harness) -> None:
    assert (await endpoint.post(report(seq=1))).status == 204
    before = await endpoint.status()
    writes = endpoint.store.patch_calls
    again = await endpoint.post(report(seq=1))
    assert again.status == 204 and again.headers["x-grid-ingest-sequence"] == "1"
    assert endpoint.store.patch_calls == writes
    assert await endpoint.status() == before


@pytest.mark.parametrize("trust_mode", ["pin", "spiffe"])
async def test_a_peer_is_refused_403_unauthorized_and_counted(pki: Pki, trust_mode: str) -> None:
    async with serving(pki.ca, sites(pki), trust_mode=trust_mode) as endpoint:
        answer = await endpoint.post(report(), who="west")
        assert answer.status == 403 and answer.body is not None
        assert answer.body == {"code": "unauthorized", "message": answer.body["message"]}
        assert no_echo(answer.headers)
        assert endpoint.event("unauthorized") == 1
        assert "gatewayFeedback" not in await endpoint.status()
        # The peer may still poll, and the site's own certificate may report.
        assert await endpoint.get_signals("west") == 200
        assert (await endpoint.post(report(), who="east")).status == 204


@pytest.mark.parametrize(
    ("items", "code"),
    [
        (headers(epoch=None), "malformed_metadata"),
        ([*headers(), ("x-grid-ingest-sequence", "2")], "malformed_metadata"),
        (headers(rejected="ten"), "malformed_metadata"),
        (headers(epoch="18446744073709551616"), "malformed_metadata"),
        (headers(sequence="1" * 21), "malformed_metadata"),
        (headers(reporter="r" * 65), "malformed_metadata"),
        (headers(replica="Not_A_Label"), "malformed_metadata"),
        (headers(clean="yes"), "malformed_metadata"),
        (headers(sequence=str(U64_MAX)), "malformed_metadata"),
        (headers(rejected=str(U64_MAX)), "malformed_metadata"),
        (headers(version="2"), "unsupported_version"),
        ([*headers(), ("X-Grid-Ingest-Extra", "1")], "unsupported_metadata"),
    ],
    ids=[
        "missing",
        "repeated",
        "non-decimal",
        "out-of-range",
        "over-long",
        "reporter",
        "replica",
        "clean",
        "max-sequence-clean",
        "max-rejected-clean",
        "version",
        "unknown",
    ],
)
async def test_header_refusals_are_400_json_with_nothing_echoed(
    endpoint: Harness, items: list[tuple[str, str]], code: str
) -> None:
    answer = await endpoint.post(items)
    assert answer.status == 400 and answer.body is not None
    assert answer.body["code"] == code and set(answer.body) == {"code", "message"}
    assert no_echo(answer.headers)
    for _name, value in items:
        if len(value) > 3:
            assert value not in answer.body["message"]
    assert "gatewayFeedback" not in await endpoint.status()


async def test_the_u64_maximum_is_accepted_as_terminal_rejected_evidence(
    endpoint: Harness,
) -> None:
    terminal = report(seq=U64_MAX, rejected=U64_MAX, clean=False)
    answer = await endpoint.post(terminal)
    assert answer.status == 204 and answer.headers["x-grid-ingest-sequence"] == str(U64_MAX)
    status = await endpoint.status()
    assert status["gatewayFeedback"]["reporters"][0]["rejected"] == str(U64_MAX)


async def test_a_body_byte_is_413_body_not_empty(endpoint: Harness) -> None:
    answer = await endpoint.post(headers(), data=b"x")
    assert answer.status == 413 and answer.body is not None
    assert answer.body["code"] == "body_not_empty" and no_echo(answer.headers)
    assert "gatewayFeedback" not in await endpoint.status()


async def test_a_chunked_body_is_413_body_not_empty(endpoint: Harness) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b""

    answer = await endpoint.post(headers(), data=chunks())
    assert answer.status == 413 and answer.body is not None
    assert answer.body["code"] == "body_not_empty"


async def test_a_declared_body_is_refused_at_once_without_being_read(
    endpoint: Harness,
) -> None:
    """The head promises a megabyte that never comes; the 413 arrives anyway, and
    the server closes the connection instead of waiting for the body."""
    host, port = endpoint.url.removeprefix("https://").rsplit(":", 1)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers())
    request = (
        f"POST /v1/site/signals/ingest HTTP/1.1\r\nHost: x\r\n{head}Content-Length: 1048576\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection(
        host, int(port), ssl=endpoint.contexts["east"], server_hostname="localhost"
    )
    try:
        writer.write(request)
        async with asyncio.timeout(3):
            answer = await reader.read(-1)
    finally:
        writer.close()
        with contextlib.suppress(ssl.SSLError, ConnectionError):
            await writer.wait_closed()
    assert answer.startswith(b"HTTP/1.1 413")
    assert b'"body_not_empty"' in answer


async def test_replays_changed_duplicates_and_decreasing_counters_are_409(
    endpoint: Harness,
) -> None:
    assert (await endpoint.post(report(seq=4, rejected=2, clean=False))).status == 204
    cases = [
        (report(seq=3, rejected=2, clean=False), "replay"),
        (report(seq=9, rejected=2, clean=False, epoch=4), "replay"),
        (report(seq=4, rejected=2, clean=True), "changed_duplicate"),
        (report(seq=5, rejected=1, clean=False), "counter_decreased"),
    ]
    for sent, code in cases:
        answer = await endpoint.post(sent)
        assert answer.status == 409 and answer.body is not None, code
        assert answer.body["code"] == code and no_echo(answer.headers)
    (reporter,) = (await endpoint.status())["gatewayFeedback"]["reporters"]
    assert reporter["sequence"] == "4"


async def test_a_new_identity_past_capacity_is_429_counted_as_overflow(pki: Pki) -> None:
    settings = FeedbackSettings(reporter_capacity=2)
    async with serving(pki.ca, sites(pki), settings=settings) as endpoint:
        for name in ("gw-a", "gw-b"):
            assert (await endpoint.post(Report(name, "r", 1, 1, 0, True))).status == 204
        answer = await endpoint.post(Report("gw-c", "r", 1, 1, 0, True))
        assert answer.status == 429 and answer.body is not None
        assert answer.body["code"] == "reporter_capacity" and no_echo(answer.headers)
        assert endpoint.event("overflow") == 1
        # Known identities keep reporting.
        assert (await endpoint.post(Report("gw-a", "r", 1, 2, 0, True))).status == 204
        assert len((await endpoint.status())["gatewayFeedback"]["reporters"]) == 2


async def test_without_feedback_the_post_is_405_and_polling_goes_on(pki: Pki) -> None:
    async with serving(pki.ca, sites(pki), enabled=False) as endpoint:
        answer = await endpoint.post(report())
        assert answer.status == 405 and answer.body is not None
        assert answer.body["code"] == "method_not_allowed" and no_echo(answer.headers)
        assert await endpoint.get_signals("east") == 200
        assert await endpoint.get_signals("west") == 200
        assert "gatewayFeedback" not in await endpoint.status()


async def test_a_get_on_the_ingest_path_is_405(endpoint: Harness) -> None:
    connector_ctx = endpoint.contexts["east"]
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=connector_ctx)) as session,
        session.get(endpoint.url + "/v1/site/signals/ingest") as resp,
    ):
        assert resp.status == 405
        assert (await resp.json())["code"] == "method_not_allowed"
