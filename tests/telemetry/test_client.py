"""The retaining client: batching, retry pacing in virtual time, nothing dropped."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.proto_gen.grid.telemetry.v1 import telemetry_pb2 as pb
from grid.telemetry.client import (
    ClientSettings,
    OutboundRecord,
    Response,
    TelemetryClient,
    TransportError,
    encode_batch,
    parse_refusal,
    retry_after_s,
    split_batches,
)

NOW = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.UTC)
PROTO = {"Content-Type": "application/x-protobuf"}


def _events(n: int, prefix: str = "e") -> list[OutboundRecord]:
    return [
        OutboundRecord("events", f"{prefix}{i}", NOW, "cpu", {"k": "v"}, b"x") for i in range(n)
    ]


def _inventory(n: int) -> list[OutboundRecord]:
    return [OutboundRecord("inventory", f"i{i}", NOW, "host") for i in range(n)]


def _refusal(status: int, code: str, retry_after: int | None = None) -> Response:
    headers = dict(PROTO)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    body = pb.Refusal(code=code, message=code, retry_after_seconds=retry_after or 0)
    return Response(status, headers, body.SerializeToString())


def _count(body: bytes, path: str) -> int:
    batch = pb.EventBatch() if path == "/v1/events" else pb.InventoryBatch()
    batch.ParseFromString(body)
    return len(batch.events) if isinstance(batch, pb.EventBatch) else len(batch.records)


class ScriptedTransport:
    """Answers from a script (then 200s), recording every request."""

    def __init__(self, script: list[Response | TransportError] | None = None) -> None:
        self.script = list(script or [])
        self.requests: list[tuple[str, bytes]] = []

    async def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> Response:
        assert headers["Content-Type"] == "application/x-protobuf"
        self.requests.append((path, body))
        if self.script:
            answer = self.script.pop(0)
            if isinstance(answer, TransportError):
                raise answer
            return answer
        ack = pb.Ack(batch_id=f"b{len(self.requests)}", accepted=_count(body, path))
        return Response(200, PROTO, ack.SerializeToString())


class VirtualSleep:
    """Records requested sleeps instead of sleeping."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def _client(
    transport: ScriptedTransport, sleep: VirtualSleep, **settings: float
) -> TelemetryClient:
    return TelemetryClient(
        transport,
        ClientSettings(**settings),
        rng=random.Random(7),
        sleep=sleep,  # type: ignore[arg-type]
    )


def test_batches_stay_within_record_limits_and_route_order() -> None:
    records = _events(2500) + _inventory(130) + _events(3, prefix="z")
    batches = split_batches(records, ClientSettings())
    sizes = [(route, len(batch)) for route, batch in batches]
    assert sizes == [
        ("events", 1000),
        ("events", 1000),
        ("events", 500),
        ("inventory", 64),
        ("inventory", 64),
        ("inventory", 2),
        ("events", 3),
    ]
    assert [r for _, b in batches for r in b] == records


def test_batches_stay_within_the_body_limit() -> None:
    records = [OutboundRecord("events", f"r{i}", NOW, "blob", {}, b"y" * 1000) for i in range(50)]
    settings = ClientSettings(request_body_bytes_max=10_000)
    batches = split_batches(records, settings)
    assert len(batches) > 5
    for route, batch in batches:
        assert len(encode_batch(route, batch)) <= 10_000


async def test_rate_limited_batch_is_resent_unchanged_no_sooner_than_retry_after() -> None:
    transport = ScriptedTransport([_refusal(429, "rate_limited", 3)])
    sleep = VirtualSleep()
    report = await _client(transport, sleep).send(_events(10))
    assert report.acknowledged_records == 10 and not report.retained
    assert len(sleep.calls) == 1 and 3.0 <= sleep.calls[0] <= 4.5
    assert transport.requests[0] == transport.requests[1]
    assert report.refusals == {"rate_limited": 1}


async def test_capacity_and_backbone_refusals_and_lost_connections_are_retried() -> None:
    transport = ScriptedTransport(
        [
            _refusal(503, "gateway_at_capacity", 1),
            TransportError("reset"),
            _refusal(503, "backbone_unavailable", 2),
        ]
    )
    sleep = VirtualSleep()
    report = await _client(transport, sleep).send(_events(5))
    assert report.acknowledged_records == 5
    assert report.attempts == 4
    assert sleep.calls[0] >= 1.0 and sleep.calls[2] >= 2.0


async def test_backbone_unavailable_throughout_retains_every_record() -> None:
    transport = ScriptedTransport([_refusal(503, "backbone_unavailable", 2)] * 3)
    sleep = VirtualSleep()
    records = _events(1500)
    report = await _client(transport, sleep, attempts_max=3).send(records)
    assert report.acknowledged == []
    assert report.retained_records == records
    assert [b.code for b in report.retained] == ["backbone_unavailable", "not_sent"]
    assert len(transport.requests) == 3


async def test_unsupported_protocol_version_stops_and_keeps_everything() -> None:
    transport = ScriptedTransport([_refusal(400, "unsupported_protocol_version")])
    report = await _client(transport, VirtualSleep()).send(_events(1200))
    assert report.retained_records == _events(1200)
    assert report.retained[0].code == "unsupported_protocol_version"
    assert len(transport.requests) == 1


async def test_invalid_batch_is_retained_and_later_batches_still_go() -> None:
    transport = ScriptedTransport([_refusal(400, "invalid_batch")])
    records = _events(1001)
    report = await _client(transport, VirtualSleep()).send(records)
    assert report.retained_records == records[:1000]
    assert report.acknowledged_records == 1


async def test_body_too_large_splits_the_batch_in_halves() -> None:
    transport = ScriptedTransport([_refusal(413, "batch_body_too_large")])
    report = await _client(transport, VirtualSleep()).send(_events(10))
    assert report.acknowledged_records == 10
    assert [_count(body, path) for path, body in transport.requests] == [10, 5, 5]


async def test_duplicate_record_ids_are_sent_as_they_are() -> None:
    transport = ScriptedTransport()
    records = _events(3, prefix="same") + _events(3, prefix="same")
    report = await _client(transport, VirtualSleep()).send(records)
    assert report.acknowledged_records == 6


def test_backoff_grows_exponentially_with_bounded_jitter_and_honours_retry_after() -> None:
    client = TelemetryClient(
        ScriptedTransport(),
        ClientSettings(backoff_base_s=0.5, backoff_cap_s=4.0, jitter_ratio=0.5),
        rng=random.Random(1),
    )
    for attempt, base in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)]:
        delays = [client.backoff_s(attempt, 0.0) for _ in range(200)]
        assert min(delays) >= base and max(delays) <= base * 1.5
        assert max(delays) - min(delays) > base * 0.3  # jitter actually spreads agents
    assert client.backoff_s(1, 10.0) >= 10.0


def test_retry_after_header_wins_over_body_and_http_dates_parse() -> None:
    assert retry_after_s(_refusal(429, "rate_limited", 5), pb.Refusal(retry_after_seconds=1)) == 5
    body_only = Response(429, PROTO, b"")
    assert retry_after_s(body_only, pb.Refusal(retry_after_seconds=2)) == 2
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)).strftime(
        "%a, %d %b %Y %H:%M:%S GMT"
    )
    assert 25 <= retry_after_s(Response(503, {"Retry-After": later}, b""), None) <= 31
    for garbage in ("soon", "1.5", "Mon, 99 Foo", "-3", ","):
        headers = {"Retry-After": garbage}
        assert retry_after_s(Response(503, headers, b""), pb.Refusal(retry_after_seconds=4)) == 4


@pytest.mark.parametrize("status", [500, 502])
async def test_bare_server_errors_are_retried_like_capacity(status: int) -> None:
    transport = ScriptedTransport([Response(status, {"Content-Type": "text/plain"}, b"oops")])
    report = await _client(transport, VirtualSleep()).send(_events(2))
    assert report.acknowledged_records == 2
    assert report.refusals == {f"http_{status}": 1}


@settings(max_examples=150, deadline=None)
@given(
    status=st.integers(100, 599),
    content_type=st.sampled_from(["application/json", "application/x-protobuf", "text/html", ""]),
    body=st.binary(max_size=200),
    retry_after=st.text(max_size=40),
)
def test_any_answer_parses_to_a_refusal_code_and_a_finite_pause(
    status: int, content_type: str, body: bytes, retry_after: str
) -> None:
    response = Response(status, {"Content-Type": content_type, "Retry-After": retry_after}, body)
    refusal = parse_refusal(response)
    assert refusal.code
    pause = retry_after_s(response, refusal)
    assert 0.0 <= pause < float("inf")


def test_the_client_reads_every_refusal_remedy_from_the_gateway_table() -> None:
    """One vocabulary: the client's next step for each wire code is the refusal's remedy."""
    from grid.core.telemetry.refusals import REFUSALS, Remedy
    from grid.telemetry.client import remedy_of

    assert {r.code: remedy_of(r.code) for r in REFUSALS} == {r.code: r.remedy for r in REFUSALS}
    assert remedy_of("tls_failed") is Remedy.STOP
    assert remedy_of("transport_error") is Remedy.RETRY
    assert remedy_of("http_503", 503) is Remedy.RETRY
    assert remedy_of("http_404", 404) is Remedy.RETAIN
