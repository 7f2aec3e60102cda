"""Tracing is off unless an OTLP endpoint is set, honours the standard variables, and
never lets a credential header into a span."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from grid.adapters.tracing import (
    CREDENTIAL_HEADERS,
    GATEWAY_SAMPLE_RATIO,
    OUTCOME,
    SANITIZE_ENV,
    default_sampler,
    outcome_span,
    sanitize_credential_headers,
    start_tracing,
    traces_endpoint,
)
from grid.errors import NotFound


def test_tracing_is_off_without_an_endpoint_and_does_nothing() -> None:
    env: dict[str, str] = {"OTEL_SERVICE_NAME": "x"}
    assert traces_endpoint(None, env) is None
    assert start_tracing("grid-operator", None, environ=env) is None
    assert env == {"OTEL_SERVICE_NAME": "x"}


@pytest.mark.parametrize(
    ("flag", "env", "expected"),
    [
        ("http://collector:4318", {}, "http://collector:4318/v1/traces"),
        ("http://collector:4318/", {}, "http://collector:4318/v1/traces"),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4318"}, "http://b:4318/v1/traces"),
        (
            None,
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:9/custom",
            },
            "http://t:9/custom",
        ),
        (
            "http://flag:1",
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4318"},
            "http://flag:1/v1/traces",
        ),
        ("http://flag:1", {"OTEL_SDK_DISABLED": "true"}, None),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4318", "OTEL_SDK_DISABLED": "TRUE"}, None),
    ],
)
def test_the_endpoint_follows_the_flag_then_the_otlp_variables(
    flag: str | None, env: dict[str, str], expected: str | None
) -> None:
    assert traces_endpoint(flag, env) == expected


def test_credential_headers_join_the_sanitize_list_without_losing_the_users() -> None:
    env = {SANITIZE_ENV: "x-session,Authorization"}
    sanitize_credential_headers(env)
    fields = env[SANITIZE_ENV].split(",")
    assert fields[:2] == ["x-session", "Authorization"]
    assert {f.lower() for f in fields} >= set(CREDENTIAL_HEADERS)
    assert [f.lower() for f in fields].count("authorization") == 1
    sanitize_credential_headers(env)
    assert env[SANITIZE_ENV].split(",") == fields


def _tracer() -> tuple[InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider


def test_an_outcome_span_says_ok_or_the_code_and_never_the_message() -> None:
    exporter, provider = _tracer()
    tracer = provider.get_tracer("test")
    with outcome_span(tracer, "fine"):
        pass
    with outcome_span(tracer, "named") as span:
        span.set_attribute(OUTCOME, "timeout")
    with pytest.raises(NotFound), outcome_span(tracer, "failed"):
        raise NotFound("GridSite 'sk-secret-in-a-message' not found")
    with pytest.raises(ValueError), outcome_span(tracer, "foreign"):
        raise ValueError("sk-secret-in-a-message")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["fine"].attributes[OUTCOME] == "ok"
    assert spans["named"].attributes[OUTCOME] == "timeout"
    assert spans["failed"].attributes[OUTCOME] == "not_found"
    assert spans["failed"].status.status_code is StatusCode.ERROR
    assert spans["foreign"].attributes[OUTCOME] == "ValueError"
    for span in spans.values():
        assert not span.events
        assert "sk-secret" not in repr(span.to_json())


def test_the_gateway_samples_its_share_unless_the_standard_variable_names_a_sampler() -> None:
    sampler = default_sampler({}, GATEWAY_SAMPLE_RATIO)
    assert sampler is not None and "TraceIdRatioBased{0.01}" in sampler.get_description()
    assert sampler.get_description().startswith("ParentBased")
    assert default_sampler({"OTEL_TRACES_SAMPLER": "always_on"}, GATEWAY_SAMPLE_RATIO) is None
    assert default_sampler({}, None) is None
