"""A real OTLP/HTTP trace receiver on loopback, for tests and the gateway bench.

`OtlpReceiver` is a small aiohttp server that answers ``POST /v1/traces`` as
an OpenTelemetry collector does: it decodes each body as an
``ExportTraceServiceRequest`` (``opentelemetry-proto``), keeps every raw
request body (decompressed when the exporter gzipped it) so a test can scan
each exported byte for its secrets, and keeps the decoded spans with their
resource's ``service.name``. `ReceivedSpan` flattens one span: ids as hex,
attributes and events as plain Python values.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

BODY_MAX_BYTES = 64 * 1024 * 1024
"""The largest export accepted (the exporter's batches are far smaller)."""

KINDS = {
    Span.SPAN_KIND_INTERNAL: "internal",
    Span.SPAN_KIND_SERVER: "server",
    Span.SPAN_KIND_CLIENT: "client",
    Span.SPAN_KIND_PRODUCER: "producer",
    Span.SPAN_KIND_CONSUMER: "consumer",
}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, which) if which else None


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items if isinstance(kv, KeyValue)}


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, flattened."""

    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


@dataclass
class OtlpReceiver:
    """``POST /v1/traces`` on 127.0.0.1; `start` returns the base endpoint URL."""

    bodies: list[bytes] = field(default_factory=list)
    spans: list[ReceivedSpan] = field(default_factory=list)
    keep_bodies: bool = True
    """Off for benchmarks: count the bytes, decode and keep nothing."""
    received: int = 0
    """Spans decoded (with ``keep_bodies``)."""
    received_bytes: int = 0
    runner: web.AppRunner | None = None
    port: int = 0

    @property
    def endpoint(self) -> str:
        """The base URL an exporter is given (``/v1/traces`` is appended to it)."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> str:
        app = web.Application(client_max_size=BODY_MAX_BYTES)
        app.router.add_post("/v1/traces", self._export)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self.runner.addresses[0][1])
        return self.endpoint

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _export(self, request: web.Request) -> web.Response:
        body = await request.read()
        encoding = request.headers.get("Content-Encoding", "").lower()
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        self.received_bytes += len(body)
        if self.keep_bodies:
            message = ExportTraceServiceRequest()
            message.ParseFromString(body)
            decoded = list(_spans(message))
            self.received += len(decoded)
            self.bodies.append(body)
            self.spans.extend(decoded)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def named(self, name: str, service: str | None = None) -> list[ReceivedSpan]:
        """The spans called ``name`` (of ``service``, when given), in arrival order."""
        return [s for s in self.spans if s.name == name and service in (None, s.service)]

    def children(self, parent: ReceivedSpan) -> list[ReceivedSpan]:
        """The spans whose parent is ``parent``, by start time."""
        found = [s for s in self.spans if s.parent_id == parent.span_id]
        return sorted(found, key=lambda s: s.start_ns)


def _spans(message: ExportTraceServiceRequest) -> Any:
    for resource_spans in message.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield ReceivedSpan(
                    service=service,
                    name=span.name,
                    kind=KINDS.get(span.kind, "unspecified"),
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                    attributes=_attributes(span.attributes),
                    events=[(e.name, _attributes(e.attributes)) for e in span.events],
                    status_code=int(span.status.code),
                )


def draw_tree(spans: list[ReceivedSpan], root: ReceivedSpan, keys: tuple[str, ...] = ()) -> str:
    """``root`` and its descendants as an indented tree, with the named attributes."""
    lines: list[str] = []

    def walk(span: ReceivedSpan, depth: int) -> None:
        shown = ", ".join(f"{k}={span.attributes[k]}" for k in keys if k in span.attributes)
        pad = "  " * depth
        lines.append(f"{pad}{span.name} [{span.kind}, {span.service}] {shown}".rstrip())
        for name, attributes in span.events:
            lines.append(f"{pad}  * event {name} {attributes}")
        for child in sorted(
            (s for s in spans if s.parent_id == span.span_id), key=lambda s: s.start_ns
        ):
            walk(child, depth + 1)

    walk(root, 0)
    return "\n".join(lines)
