"""The retaining telemetry client: batches records, sends them over mTLS, never drops them.

`TelemetryClient.send` splits records into batches the gateway accepts
(at most 1,000 events or 64 inventory records, and at most the request body
limit), posts each one, and sorts the answers:

- 200 ``Ack``: acknowledged; the batch is durable on the gateway's backbone.
- 429 ``rate_limited`` and 503 (``gateway_at_capacity``, ``backbone_unavailable``),
  plus connection failures and other 5xx answers: the batch is kept and retried,
  never sooner than ``Retry-After``, with jittered exponential backoff. The same
  bytes are re-sent, so the gateway's content-derived batch ID lets the backbone
  de-duplicate a retry of a batch that did land without an answer.
- 413 ``batch_body_too_large``: the batch is split in two and each half sent.
- ``agent_not_registered``, ``agent_not_admitted``, ``unsupported_protocol_version``:
  nothing else can succeed until an operator acts, so sending stops and every
  unsent record is retained and reported.
- ``invalid_batch`` and ``unsupported_content_type``: that batch is retained and
  reported; the others still go.

Nothing is de-duplicated or retimestamped here: ``record_id`` exists so consumers
can de-duplicate, and ``observed_at`` stays the producer's observation. Sleeping
and randomness are injected, so tests run the retry policy in virtual time.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import json
import random
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import aiohttp
from google.protobuf.message import DecodeError

from grid.adapters.backbone import Route
from grid.core.telemetry.refusals import REMEDIES, Remedy
from grid.errors import GridError
from grid.proto_gen.grid.telemetry.v1 import telemetry_pb2 as pb

PROTOCOL_VERSION = 1
SCHEMA_VERSION = 1
PROTOBUF_CONTENT_TYPE = "application/x-protobuf"
ROUTE_PATHS: dict[Route, str] = {"events": "/v1/events", "inventory": "/v1/inventory"}

TLS_FAILED = "tls_failed"
"""The client's own code for a gateway certificate that did not verify: like a refusal
whose remedy is `Remedy.STOP`, no batch can succeed until an operator acts."""


def remedy_of(code: str, status: int = 0) -> Remedy:
    """What to do after the outcome ``code``: the gateway's table for its codes (`REMEDIES`),
    retry for a transport failure or a 5xx without a known code, stop for a bad certificate."""
    if code == TLS_FAILED:
        return Remedy.STOP
    known = REMEDIES.get(code)
    if known is not None:
        return known
    if code.startswith("transport") or status >= 500 or code.startswith("http_5"):
        return Remedy.RETRY
    return Remedy.RETAIN


@dataclass(frozen=True)
class ClientSettings:
    """The client's limits and retry policy."""

    event_batch_records_max: int = 1000
    """Most events per batch (the gateway's default limit)."""

    inventory_batch_records_max: int = 64
    """Most inventory records per batch (the gateway's default limit)."""

    request_body_bytes_max: int = 8 * 1024 * 1024
    """Largest encoded batch in bytes; larger batches are split before sending."""

    attempts_max: int = 8
    """Tries per batch before it is retained and sending stops. More rides out longer outages."""

    backoff_base_s: float = 0.5
    """First retry delay; doubled per attempt up to `backoff_cap_s`."""

    backoff_cap_s: float = 30.0
    """Largest backoff delay (a longer Retry-After still wins)."""

    jitter_ratio: float = 0.5
    """Each delay is stretched by a random 0..ratio fraction so agents do not retry in step."""

    request_timeout_s: float = 30.0
    """Whole-request timeout; a timed-out batch counts as not acknowledged and is retried."""


@dataclass(frozen=True)
class OutboundRecord:
    """One record as the producer observed it."""

    route: Route
    record_id: str
    observed_at: dt.datetime
    type: str
    attributes: Mapping[str, str] = field(default_factory=dict)
    payload: bytes = b""


@dataclass(frozen=True)
class Response:
    """What came back for one POST."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class TransportError(GridError):
    """The request got no HTTP answer (connection refused or reset, timeout)."""

    code = "transport_error"


class Transport(Protocol):
    """Posts one body to the gateway; the seam tests replace."""

    async def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> Response:
        """POST ``body`` to ``path``; raise `TransportError` when no answer came."""
        ...


@dataclass
class RetainedBatch:
    """Records the gateway did not acknowledge, with the last reason."""

    records: list[OutboundRecord]
    code: str
    message: str


@dataclass
class SendReport:
    """The outcome of one `TelemetryClient.send`: nothing is silently lost."""

    acknowledged: list[tuple[str, int]] = field(default_factory=list)
    """``(batch_id, accepted)`` per acknowledged batch."""

    retained: list[RetainedBatch] = field(default_factory=list)
    attempts: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    """How often each refusal code (or ``transport_error``) was seen."""

    @property
    def acknowledged_records(self) -> int:
        """Records the gateway acknowledged."""
        return sum(accepted for _, accepted in self.acknowledged)

    @property
    def retained_records(self) -> list[OutboundRecord]:
        """Every record not acknowledged, in input order per batch."""
        return [r for batch in self.retained for r in batch.records]


def _record_message(record: OutboundRecord) -> pb.Event | pb.InventoryRecord:
    message: pb.Event | pb.InventoryRecord = (
        pb.Event(payload=record.payload) if record.route == "events" else pb.InventoryRecord()
    )
    message.record_id = record.record_id
    message.type = record.type
    message.observed_at.FromDatetime(record.observed_at.astimezone(dt.UTC))
    message.attributes.update(record.attributes)
    return message


def encode_batch(route: Route, records: Sequence[OutboundRecord]) -> bytes:
    """The Protobuf body for ``records``; ``origin`` and ``reception`` are left for the gateway."""
    batch: pb.EventBatch | pb.InventoryBatch
    if route == "events":
        batch = pb.EventBatch(protocol_version=PROTOCOL_VERSION, schema_version=SCHEMA_VERSION)
        batch.events.extend(_record_message(r) for r in records)  # type: ignore[misc]
    else:
        batch = pb.InventoryBatch(protocol_version=PROTOCOL_VERSION, schema_version=SCHEMA_VERSION)
        batch.records.extend(_record_message(r) for r in records)  # type: ignore[misc]
    return batch.SerializeToString()


def split_batches(
    records: Sequence[OutboundRecord], settings: ClientSettings
) -> list[tuple[Route, list[OutboundRecord]]]:
    """Consecutive records of one route, grouped within the count and byte limits."""
    limits = {
        "events": settings.event_batch_records_max,
        "inventory": settings.inventory_batch_records_max,
    }
    batches: list[tuple[Route, list[OutboundRecord]]] = []
    current: list[OutboundRecord] = []
    size = 0
    for record in records:
        # A repeated field costs the record's bytes plus a tag and a length varint.
        cost = _record_message(record).ByteSize() + 11
        if current and (
            record.route != current[0].route
            or len(current) >= limits[record.route]
            or size + cost > settings.request_body_bytes_max - 16
        ):
            batches.append((current[0].route, current))
            current, size = [], 0
        current.append(record)
        size += cost
    if current:
        batches.append((current[0].route, current))
    return batches


def retry_after_s(response: Response, refusal: pb.Refusal | None) -> float:
    """Seconds the gateway asked the client to wait (header first, then the body field)."""
    value = {k.lower(): v for k, v in response.headers.items()}.get("retry-after", "").strip()
    # RFC 9110 delay-seconds is ASCII digits only; str.isdigit() also accepts "²".
    if value.isascii() and value.isdigit():
        return float(value)
    if value:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            when = None  # Unparseable: fall back to the body's field.
        if when is not None and when.tzinfo is not None:
            return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())
    return float(refusal.retry_after_seconds) if refusal is not None else 0.0


def parse_refusal(response: Response) -> pb.Refusal:
    """The refusal in a non-200 answer; answers without one get code ``http_{status}``."""
    content_type = {k.lower(): v for k, v in response.headers.items()}.get("content-type", "")
    refusal = pb.Refusal()
    try:
        if content_type.startswith("application/json"):
            doc = json.loads(response.body)
            refusal.code = str(doc.get("code", ""))
            refusal.message = str(doc.get("message", ""))
            refusal.retry_after_seconds = int(doc.get("retry_after_seconds", 0) or 0)
        elif content_type.startswith(PROTOBUF_CONTENT_TYPE):
            refusal.ParseFromString(response.body)
    except (ValueError, AttributeError, DecodeError):
        refusal = pb.Refusal()
    if not refusal.code:
        refusal.code = f"http_{response.status}"
    return refusal


def _stops_sending(code: str) -> bool:
    """After this final outcome no later batch can succeed now: refused for good, or out
    of attempts against a gateway that is busy, down or unreachable."""
    return remedy_of(code) in (Remedy.STOP, Remedy.RETRY)


class TelemetryClient:
    """Sends records through a `Transport` and retains whatever is not acknowledged."""

    def __init__(
        self,
        transport: Transport,
        settings: ClientSettings | None = None,
        *,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_ack: Callable[[str, int, list[OutboundRecord]], None] | None = None,
    ) -> None:
        self.transport = transport
        self.settings = settings or ClientSettings()
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._on_ack = on_ack

    def backoff_s(self, attempt: int, retry_after: float) -> float:
        """Delay before retry number ``attempt`` (1-based): never below ``retry_after``."""
        s = self.settings
        exponential = min(s.backoff_cap_s, s.backoff_base_s * 2 ** (attempt - 1))
        stretch = 1.0 + s.jitter_ratio * float(self._rng.random())
        return float(max(retry_after, exponential)) * stretch

    async def send(self, records: Sequence[OutboundRecord]) -> SendReport:
        """Send every record; the report lists what was acknowledged and what was retained."""
        report = SendReport()
        queue = split_batches(records, self.settings)
        while queue:
            route, batch = queue.pop(0)
            outcome = await self._deliver(route, batch, report)
            if outcome is None:
                continue
            if remedy_of(outcome.code) is Remedy.SPLIT and len(batch) > 1:
                half = len(batch) // 2
                queue[0:0] = [(route, batch[:half]), (route, batch[half:])]
                continue
            report.retained.append(outcome)
            if _stops_sending(outcome.code):
                report.retained += [
                    RetainedBatch(rest, "not_sent", outcome.code) for _, rest in queue
                ]
                break
        return report

    async def _deliver(
        self, route: Route, batch: list[OutboundRecord], report: SendReport
    ) -> RetainedBatch | None:
        """Post one batch until acknowledged (None) or a reason to keep it (RetainedBatch)."""
        body = encode_batch(route, batch)
        headers = {"Content-Type": PROTOBUF_CONTENT_TYPE, "Accept": PROTOBUF_CONTENT_TYPE}
        last = RetainedBatch(batch, "not_sent", "")
        wait = 0.0
        for attempt in range(1, self.settings.attempts_max + 1):
            if attempt > 1:
                await self._sleep(self.backoff_s(attempt - 1, wait))
            report.attempts += 1
            wait = 0.0
            try:
                response = await self.transport.post(ROUTE_PATHS[route], body, headers)
            except TransportError as exc:
                last = RetainedBatch(batch, exc.code, exc.message)
                report.refusals[exc.code] = report.refusals.get(exc.code, 0) + 1
                if remedy_of(exc.code) is Remedy.STOP:
                    return last
                continue
            if response.status == 200:
                ack = pb.Ack()
                try:
                    ack.ParseFromString(response.body)
                except DecodeError:
                    ack.accepted = len(batch)
                report.acknowledged.append((ack.batch_id, ack.accepted))
                if self._on_ack is not None:
                    self._on_ack(ack.batch_id, ack.accepted, batch)
                return None
            refusal = parse_refusal(response)
            report.refusals[refusal.code] = report.refusals.get(refusal.code, 0) + 1
            last = RetainedBatch(batch, refusal.code, refusal.message)
            if remedy_of(refusal.code, response.status) is Remedy.RETRY:
                wait = retry_after_s(response, refusal)
                continue
            return last
        return last


EXPECT_CONTINUE_BYTES_MIN = 64 * 1024
"""Bodies at least this large ask for ``100 Continue`` first: the gateway refuses before
the upload (rate, capacity, roster), so a refused large batch costs no bandwidth and the
client reads the refusal instead of a reset connection."""


class HttpsTransport:
    """POSTs over mTLS to ``https://HOST:PORT`` with aiohttp, one connection reused."""

    def __init__(
        self,
        gateway: str,
        *,
        cert: Path,
        key: Path,
        ca: Path,
        timeout_s: float = 30.0,
        expect_continue_bytes_min: int = EXPECT_CONTINUE_BYTES_MIN,
    ) -> None:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
        context.load_cert_chain(str(cert), str(key))
        self._base = f"https://{gateway}"
        self._context = context
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._expect_min = expect_continue_bytes_min

    async def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> Response:
        """POST over mTLS; every failure without an HTTP answer is a `TransportError`."""
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._context, limit=1)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        try:
            async with self._session.post(
                self._base + path,
                data=body,
                headers=headers,
                expect100=len(body) >= self._expect_min,
            ) as resp:
                return Response(resp.status, dict(resp.headers), await resp.read())
        except aiohttp.ClientConnectorCertificateError as exc:
            raise TransportError("the gateway certificate did not verify", code=TLS_FAILED) from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise TransportError(f"no answer from the gateway: {type(exc).__name__}") from exc

    async def close(self) -> None:
        """Close the connection."""
        if self._session is not None:
            await self._session.close()
            self._session = None
