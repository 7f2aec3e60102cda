"""``POST /v1/site/signals/ingest``: the gateway's ingest feedback on the signals listener.

The route runs inside the signals server's budget middleware, so reading,
admission and the store write share one request budget (5 s; past it 504
``budget_exceeded`` with nothing echoed). In order:

1. only a Local caller (the site's own certificate, under pin or SPIFFE) may
   submit: anyone else gets 403 ``unauthorized``, counted;
2. any body byte or a chunked body gets 413 ``body_not_empty``, and the
   connection is closed without reading the body;
3. the version-1 headers are parsed (`grid.core.signals.feedback.parse_report`): 400s;
4. the single `FeedbackWriter` admits and persists the report: 409, 429, 503;
5. only then the 204 echoes ``x-grid-ingest-epoch`` and ``x-grid-ingest-sequence``.

An operator started with ``--no-ingest-feedback`` answers the POST 405, as one
without feedback does, and echoes nothing; ``GET /v1/site/signals`` is
unaffected either way. Refusal messages are fixed strings: nothing a client
sent is echoed in a body or a log.

Test-only fault hook: when the environment variable named by `KILL_HOOK_ENV`
is ``1`` at start, the process SIGKILLs itself after the first durable write
and before answering, so a test can prove that a reporter's resend after a
crash leaves nothing doubled. It is off unless that variable is set, and no
production deployment sets it.
"""

from __future__ import annotations

import datetime as dt
import os
import signal

from aiohttp import web
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry

from grid.adapters.signals_server import INGEST_PATH, SignalsServer, refusal
from grid.adapters.store.port import ResourceStore
from grid.adapters.tracing import OUTCOME, outcome_span
from grid.core.signals.connections import ConnectionClass
from grid.core.signals.feedback import (
    BodyNotEmpty,
    FeedbackEvent,
    FeedbackRefusal,
    Unauthorized,
    echo_headers,
    parse_report,
)
from grid.operator.feedback_writer import FeedbackEvents, FeedbackSettings, FeedbackWriter
from grid.operator.settings import OperatorSettings

_tracer = trace.get_tracer(__name__)

KILL_HOOK_ENV = "GRID_TEST_KILL_AFTER_FEEDBACK_WRITE"
"""Test-only: ``1`` makes the operator SIGKILL itself between a durable write and its 204."""


class IngestEndpoint:
    """The ingest route of one signals server; ``writer`` None means feedback is off."""

    def __init__(
        self,
        server: SignalsServer,
        events: FeedbackEvents,
        writer: FeedbackWriter | None,
    ) -> None:
        self.server = server
        self.events = events
        self.writer = writer
        self._kill_after_write = os.environ.get(KILL_HOOK_ENV) == "1"

    def register(self) -> None:
        """Add the POST route to the server (before it starts)."""
        self.server.route("POST", INGEST_PATH, self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Answer one ingest report, in the span of one feedback ingest."""
        with outcome_span(_tracer, "grid.feedback.ingest", kind=SpanKind.SERVER) as span:
            response = await self._answer(request)
            span.set_attribute("http.response.status_code", response.status)
            return response

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        if self.writer is None:
            trace.get_current_span().set_attribute(OUTCOME, "method_not_allowed")
            response = refusal(405, "method_not_allowed", "this operator takes no ingest feedback")
            response.headers["Allow"] = ""
            return response
        if self.server.connection_class(request) is not ConnectionClass.LOCAL:
            self.events.inc(FeedbackEvent.UNAUTHORIZED)
            return _refused(Unauthorized("only this site's own certificate may report"), True)
        if request.content_length or "Transfer-Encoding" in request.headers:
            return _refused(BodyNotEmpty("an ingest report has an empty body"), True)
        try:
            report = parse_report(request.headers.items())
            await self.writer.submit(report, dt.datetime.now(dt.UTC))
        except FeedbackRefusal as refused:
            return _refused(refused, False)
        if self._kill_after_write:
            os.kill(os.getpid(), signal.SIGKILL)
        return web.Response(status=204, headers=echo_headers(report))


def _refused(error: FeedbackRefusal, close: bool) -> web.Response:
    """The JSON refusal; ``close`` ends the connection without reading what remains.

    The refusal's code is the outcome of the ingest's span (`IngestEndpoint.handle`)."""
    trace.get_current_span().set_attribute(OUTCOME, error.code)
    response = refusal(error.status, error.code, error.message)
    if close:
        response.force_close()
    return response


def wire_ingest(
    server: SignalsServer,
    store: ResourceStore,
    network: str,
    registry: CollectorRegistry,
    settings: FeedbackSettings | None,
) -> tuple[FeedbackEvents, FeedbackWriter | None]:
    """Register the ingest route on ``server``; ``settings`` None means feedback is off.

    The events metric is registered either way, so ``/metrics`` keeps one shape
    whether or not this operator takes feedback.
    """
    events = FeedbackEvents(registry)
    writer = FeedbackWriter(store, network, events, settings) if settings is not None else None
    IngestEndpoint(server, events, writer).register()
    return events, writer


def wire_feedback(
    server: SignalsServer,
    store: ResourceStore,
    network: str,
    registry: CollectorRegistry,
    settings: OperatorSettings,
) -> FeedbackWriter | None:
    """Under poll, the ingest route from the operator's settings: the single feedback
    writer, or None (the POST answers 405) with ``--no-ingest-feedback``."""
    feedback = None
    if settings.ingest_feedback:
        feedback = FeedbackSettings(
            reporter_capacity=settings.feedback_reporter_capacity,
            reporter_idle_s=settings.feedback_reporter_idle_s,
            write_attempts=settings.feedback_write_attempts,
        )
    return wire_ingest(server, store, network, registry, feedback)[1]
