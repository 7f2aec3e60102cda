"""`read_exposition` parses only the families it reads, and still refuses a non-exposition."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from grid.operator.gateway_scrape import read_exposition


def exposition() -> str:
    registry = CollectorRegistry()
    tokens = Counter(
        "grid_gateway_tenant_tokens", "t", ["tenant", "cluster", "direction"], registry=registry
    )
    upstream = Counter("grid_gateway_upstream_requests", "u", ["cluster"], registry=registry)
    selections = Counter("grid_gateway_selections", "s", ["cluster", "group"], registry=registry)
    latency = Histogram("grid_gateway_request_seconds", "h", ["cluster"], registry=registry)
    lookalike = Counter("grid_gateway_selections_dropped", "d", ["cluster"], registry=registry)
    for n, cluster in enumerate(("east", "west")):
        tokens.labels("acme", cluster, "input").inc(10 + n)
        upstream.labels(cluster).inc(3 + n)
        selections.labels(cluster, "0").inc(2 + n)
        latency.labels(cluster).observe(0.2)
        lookalike.labels(cluster).inc(99)
    return generate_latest(registry).decode()


def test_the_families_read_come_out_as_a_whole_parse_would_give_them() -> None:
    counters = read_exposition(exposition())
    assert counters.tokens == {("acme", "east", "input"): 10, ("acme", "west", "input"): 11}
    assert counters.upstream == {"east": 3, "west": 4}
    assert counters.selections == {("east", 0): 2, ("west", 0): 3}


@pytest.mark.parametrize("body", ["<html><body>502</body></html>", "not { metrics"])
def test_a_body_that_is_not_an_exposition_still_fails(body: str) -> None:
    with pytest.raises(ValueError):
        read_exposition(body)
