"""The gateway's Prometheus metrics (admin ``/metrics``); every label set is closed."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

OUTCOMES = (
    "routed",
    "no_candidate",
    "bad_request",
    "too_large",
    "not_found",
    "upstream_unavailable",
    "stream_broken",
)
"""Every value of ``grid_gateway_requests_total{outcome}``."""

RELOADS = ("accepted", "rejected")


class GatewayMetrics:
    """Counters and gauges of one gateway process."""

    def __init__(self, clusters: Iterable[str]) -> None:
        self.registry = CollectorRegistry()
        requests = Counter(
            "grid_gateway_requests_total",
            "Client requests by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.requests = {o: requests.labels(o) for o in OUTCOMES}
        upstream = Counter(
            "grid_gateway_upstream_requests_total",
            "Requests sent to each cluster (every attempt, failovers included).",
            ["cluster"],
            registry=self.registry,
        )
        self.upstream = {c: upstream.labels(c) for c in clusters}
        self.failovers = Counter(
            "grid_gateway_failovers_total",
            "Attempts abandoned for the next candidate before any byte reached the client.",
            registry=self.registry,
        )
        reloads = Counter(
            "grid_gateway_overlay_reloads_total",
            "Overlay file reloads by result; a rejected one keeps the last good snapshot.",
            ["result"],
            registry=self.registry,
        )
        self.reloads = {r: reloads.labels(r) for r in RELOADS}

    def gauge(self, name: str, doc: str, read: Callable[[], float]) -> None:
        """A gauge whose value is read at scrape time."""
        Gauge(name, doc, registry=self.registry).set_function(read)
