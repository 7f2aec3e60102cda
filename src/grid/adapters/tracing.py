"""OpenTelemetry traces for Grid's processes (SPEC-DECISIONS §17), off unless asked for.

`start_tracing` turns traces on for one process when an OTLP/HTTP endpoint is
given, by ``--otlp-endpoint`` or by the standard environment
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, then ``OTEL_EXPORTER_OTLP_ENDPOINT``);
``OTEL_SDK_DISABLED=true`` keeps it off whatever is set. A flag names the base
URL, as the environment variable does, and ``/v1/traces`` is appended. Without
an endpoint nothing is installed, every tracer stays the API's no-op one, and a
span costs one function call.

Everything else is the SDK's own reading of the standard ``OTEL_*`` variables:
the sampler (``OTEL_TRACES_SAMPLER``), the batch processor (``OTEL_BSP_*``),
the exporter's headers, timeout, compression and certificates, the resource
(``OTEL_RESOURCE_ATTRIBUTES``, and ``OTEL_SERVICE_NAME`` over the service name
given here) and the propagators (``OTEL_PROPAGATORS``; W3C ``traceparent`` by
default).

No span may hold a credential. Grid's own spans carry names, counts and
outcomes only; the aiohttp instrumentations would copy request headers into
attributes if ``OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_*`` asked them to, so
`start_tracing` adds the credential-bearing headers to the instrumentations'
sanitize list (their values become ``[REDACTED]``) before any span is made.

Only the API is imported with this module (a few milliseconds); the SDK, the
exporter and the instrumentations (a few hundred) are imported when tracing is
switched on, so a process that never traces never pays for them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from opentelemetry import propagate, trace
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, Span, SpanKind, StatusCode
from opentelemetry.util.types import AttributeValue

from grid.errors import GridError

if TYPE_CHECKING:
    from aiohttp import TraceConfig
    from aiohttp.typedefs import Handler, Middleware
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import Sampler

TRACES_PATH = "/v1/traces"
"""The OTLP/HTTP traces path appended to a base endpoint."""
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
DISABLED_ENV = "OTEL_SDK_DISABLED"
SANITIZE_ENV = "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SANITIZE_FIELDS"
CREDENTIAL_HEADERS = (
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "cookie",
    "set-cookie",
)
"""Headers whose values are credentials: never copied into a span attribute."""

SERVICE_OPERATOR = "grid-operator"
SERVICE_GATEWAY = "grid-gateway"
SAMPLER_ENV = "OTEL_TRACES_SAMPLER"
GATEWAY_SAMPLE_RATIO = 0.01
"""Share of requests a gateway traces when ``OTEL_TRACES_SAMPLER`` is unset (its
hot path; parent-based, so a caller's sampled ``traceparent`` is always followed).
A span costs tens of microseconds in the Python SDK, so tracing every request
would cost a large share of throughput (bench/gateway.py measures both); more
traces need ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` with a larger
``OTEL_TRACES_SAMPLER_ARG``, or ``parentbased_always_on``. The operator's spans
are few (a round a second) and keep the SDK's default, every span."""


def traces_endpoint(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """The OTLP/HTTP traces URL to export to, or None when tracing stays off.

    A flag wins over the environment, which is read as the OTLP exporter
    specification says: the signal-specific variable is a full URL, the
    general one a base URL.
    """
    if environ.get(DISABLED_ENV, "").strip().lower() == "true":
        return None
    if flag:
        return flag.rstrip("/") + TRACES_PATH
    traces = environ.get(TRACES_ENDPOINT_ENV, "").strip()
    if traces:
        return traces
    base = environ.get(ENDPOINT_ENV, "").strip()
    return base.rstrip("/") + TRACES_PATH if base else None


def sanitize_credential_headers(environ: MutableMapping[str, str]) -> None:
    """Add `CREDENTIAL_HEADERS` to the instrumentations' header sanitize list."""
    present = [f.strip() for f in environ.get(SANITIZE_ENV, "").split(",") if f.strip()]
    lowered = {f.lower() for f in present}
    missing = [h for h in CREDENTIAL_HEADERS if h not in lowered]
    if missing:
        environ[SANITIZE_ENV] = ",".join([*present, *missing])


@dataclass
class Tracing:
    """Traces switched on for this process; `shutdown` exports what is still queued."""

    provider: TracerProvider
    endpoint: str

    def shutdown(self) -> None:
        """Flush the batch processor and close the exporter (idempotent)."""
        self.provider.shutdown()


def start_tracing(
    service: str,
    flag: str | None,
    *,
    attributes: Mapping[str, str] | None = None,
    environ: MutableMapping[str, str] | None = None,
    sample_ratio: float | None = None,
) -> Tracing | None:
    """Install the SDK as this process's tracer provider when an endpoint is set.

    ``service`` is the default ``service.name``; ``attributes`` are added to the
    resource (the operator's site, for example). Returns None, changing
    nothing, when tracing stays off. ``sample_ratio`` is the parent-based ratio
    used when ``OTEL_TRACES_SAMPLER`` is unset (None: the SDK's default, all).
    """
    env = os.environ if environ is None else environ
    endpoint = traces_endpoint(flag, env)
    if endpoint is None:
        return None
    # Imported here: a process that never traces never loads the SDK (see above).
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    sanitize_credential_headers(env)
    resource = Resource.create({SERVICE_NAME: service, **(attributes or {})}).merge(
        OTELResourceDetector().detect()
    )
    provider = TracerProvider(resource=resource, sampler=default_sampler(env, sample_ratio))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    return Tracing(provider, endpoint)


def default_sampler(environ: Mapping[str, str], sample_ratio: float | None) -> Sampler | None:
    """Parent-based ``sample_ratio`` unless ``OTEL_TRACES_SAMPLER`` names a sampler
    (None: the SDK reads the environment, and samples everything by default)."""
    if sample_ratio is None or environ.get(SAMPLER_ENV, "").strip():
        return None
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    return ParentBased(TraceIdRatioBased(sample_ratio))


def tracing_on() -> bool:
    """Whether this process records traces (a provider other than the API's no-op one)."""
    return not isinstance(trace.get_tracer_provider(), ProxyTracerProvider | NoOpTracerProvider)


def client_trace_configs() -> list[TraceConfig]:
    """aiohttp client tracing for a session: a client span and ``traceparent`` per
    request while tracing is on, nothing at all while it is off."""
    if not tracing_on():
        return []
    from opentelemetry.instrumentation.aiohttp_client import create_trace_config

    return [create_trace_config()]


def server_middlewares() -> list[Middleware]:
    """aiohttp server tracing for an application while tracing is on, none while off:
    one SERVER span per request, continuing the caller's ``traceparent``.

    The span is named ``{method} {route}`` (the method alone for a catch-all
    route) and carries the method, the path and the answer's status; a handler
    adds its own attributes to ``trace.get_current_span()``. Grid's own
    middleware rather than the aiohttp-server instrumentation: that one only
    works after patching every ``web.Application`` of the process.
    """
    return [_server_span] if tracing_on() else []


_SERVER_TRACER = trace.get_tracer("grid.adapters.http")


@web.middleware
async def _server_span(request: web.Request, handler: Handler) -> web.StreamResponse:
    route = request.match_info.route.resource
    canonical = route.canonical if route is not None else ""
    name = request.method if not canonical or "{" in canonical else f"{request.method} {canonical}"
    with _SERVER_TRACER.start_as_current_span(
        name,
        context=propagate.extract(request.headers),
        kind=SpanKind.SERVER,
        attributes={"http.request.method": request.method, "url.path": request.path},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            span.set_attribute("http.response.status_code", exc.status)
            raise
        span.set_attribute("http.response.status_code", response.status)
        if response.status >= 500:
            span.set_status(StatusCode.ERROR)
        return response


OUTCOME = "grid.outcome"
"""The attribute naming how a traced step ended: ``ok``, or a refusal or error code."""


@contextmanager
def outcome_span(
    tracer: trace.Tracer,
    name: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
) -> Iterator[Span]:
    """A span around one step whose `OUTCOME` is ``ok`` unless it raises.

    An exception sets the outcome to its ``code`` (a `GridError`) or its class
    name, and the span status to ERROR with that word alone: the exception's
    message and stack are never recorded, since a message may quote what the
    step was handling. The body may set `OUTCOME` itself first.
    """
    with tracer.start_as_current_span(
        name,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            code = exc.code if isinstance(exc, GridError) else type(exc).__name__
            if span.is_recording():
                span.set_attribute(OUTCOME, code)
                span.set_status(StatusCode.ERROR, code)
            raise
        if span.is_recording() and OUTCOME not in getattr(span, "attributes", {}):
            span.set_attribute(OUTCOME, "ok")


_STORE_TRACER = trace.get_tracer("grid.adapters.store")


def status_write_span(kind: str, name: str, status: Mapping[str, object]) -> Any:
    """The span of one status write: the kind, the object's name and the top-level
    status fields written (their names, never their values)."""
    return outcome_span(
        _STORE_TRACER,
        "grid.status_write",
        {
            "grid.kind": kind,
            "grid.resource": name,
            "grid.status.fields": sorted(str(k) for k in status),
        },
    )
