"""The spans of one routed request (SPEC-DECISIONS §17), recorded only when sampled.

The server span (opened by `grid.adapters.tracing.server_middlewares`) gets the
routing decision: the model, the tenant's label, the overlay revision, and the
group and mode the first pick came from. Each attempt is a child CLIENT span
named ``grid.attempt`` with its cluster, index and outcome, and the W3C
``traceparent`` sent to the provider is that attempt's, so the provider's own
spans hang under the attempt that reached it. A failover and an ejection are
events on the server span.

When the request is not sampled (or tracing is off) the current span does not
record, and every function here returns at its first test: no span is made and
no header is added. Nothing here reads a header value or a body.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, StatusCode

from grid.gateway.snapshot import Candidate, Snapshot

_TRACER = trace.get_tracer("grid.gateway")

OUTCOME = "grid.outcome"


def recording() -> bool:
    """Whether the request's server span records (tracing on and the request sampled);
    when it does not, every function here is a no-op."""
    return trace.get_current_span().is_recording()


def routed(model: str, tenant: str | None, snapshot: Snapshot, first: Candidate) -> None:
    """Put the routing decision on the request's server span."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attribute("gen_ai.request.model", model)
    if tenant is not None:
        span.set_attribute("grid.tenant", tenant)
    if snapshot.revision is not None:
        span.set_attribute("grid.overlay.revision", snapshot.revision)
    span.set_attribute("grid.selection.group", first.selection_group)
    span.set_attribute("grid.selection.mode", snapshot.policy.name)


def failed_over(candidate: Candidate, outcome: str) -> None:
    """The attempt to ``candidate`` ended in ``outcome`` and the next candidate is tried."""
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event("failover", {"grid.cluster": candidate.cluster, OUTCOME: outcome})


def ejected(candidate: Candidate) -> None:
    """Passive health took ``candidate`` out of selection."""
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event("ejection", {"grid.cluster": candidate.cluster})


@contextmanager
def attempt(candidate: Candidate, index: int, headers: MutableMapping[str, str]) -> Iterator[Span]:
    """The CLIENT span of one attempt; ``headers`` gain its ``traceparent``.

    The body sets `OUTCOME` (and the answer's status); an exception leaves
    ``error`` with its class name, never its message.
    """
    parent = trace.get_current_span()
    if not parent.is_recording():
        yield parent
        return
    with _TRACER.start_as_current_span(
        "grid.attempt",
        kind=SpanKind.CLIENT,
        attributes={"grid.cluster": candidate.cluster, "grid.attempt": index},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        propagate.inject(headers)
        try:
            yield span
        except BaseException as exc:
            span.set_attribute(OUTCOME, type(exc).__name__)
            span.set_status(StatusCode.ERROR, type(exc).__name__)
            raise


def attempt_ended(span: Span, outcome: str, status: int | None = None) -> None:
    """How one attempt ended: ``ok``, ``failover_status``, ``connect_failed`` or
    ``no_credential``, with the answer's status when there was one."""
    if not span.is_recording():
        return
    span.set_attribute(OUTCOME, outcome)
    if status is not None:
        span.set_attribute("http.response.status_code", status)
    if outcome != "ok":
        span.set_status(StatusCode.ERROR, outcome)
