"""The operator's /metrics, /healthz and /readyz endpoint on a real loopback socket."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from grid.adapters.health_server import ClosedCounter, HealthServer


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_endpoints_report_liveness_readiness_and_metrics(
    http: aiohttp.ClientSession,
) -> None:
    registry = CollectorRegistry()
    events = ClosedCounter(
        "grid_gateway_feedback_events_total",
        "Gateway feedback events.",
        "event",
        ("conflict", "conflict_exhausted", "overflow", "unauthorized", "write_failure"),
        registry,
    )
    ready = {"now": False}
    server = HealthServer(registry, ready=lambda: ready["now"])
    host, port = await server.start("127.0.0.1", 0)
    base = f"http://{host}:{port}"
    try:
        async with http.get(f"{base}/healthz") as resp:
            assert resp.status == 200
        async with http.get(f"{base}/readyz") as resp:
            assert resp.status == 503
        ready["now"] = True
        async with http.get(f"{base}/readyz") as resp:
            assert resp.status == 200
        events.inc("conflict")
        events.inc("conflict")
        async with http.get(f"{base}/metrics") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            text = await resp.text()
        samples = {
            s.labels["event"]: s.value
            for f in text_string_to_metric_families(text)
            if f.name == "grid_gateway_feedback_events"
            for s in f.samples
            if s.name.endswith("_total")
        }
        assert samples == {
            "conflict": 2.0,
            "conflict_exhausted": 0.0,
            "overflow": 0.0,
            "unauthorized": 0.0,
            "write_failure": 0.0,
        }
        assert events.value("conflict") == 2.0
    finally:
        await server.stop()


async def test_an_async_ready_check_is_awaited(http: aiohttp.ClientSession) -> None:
    async def ready() -> bool:
        return True

    server = HealthServer(CollectorRegistry(), ready=ready)
    host, port = await server.start("127.0.0.1", 0)
    try:
        async with http.get(f"http://{host}:{port}/readyz") as resp:
            assert resp.status == 200
    finally:
        await server.stop()


def test_a_closed_counter_refuses_undeclared_label_values() -> None:
    counter = ClosedCounter("grid_x_total", "x", "outcome", ("ok",), CollectorRegistry())
    with pytest.raises(ValueError):
        counter.inc("peer-10.0.0.7")
    with pytest.raises(ValueError):
        ClosedCounter("grid_y_total", "y", "outcome", (), CollectorRegistry())


async def test_a_taken_port_raises(http: aiohttp.ClientSession) -> None:
    first = HealthServer(CollectorRegistry())
    host, port = await first.start("127.0.0.1", 0)
    try:
        with pytest.raises(OSError):
            await HealthServer(CollectorRegistry()).start(host, port)
    finally:
        await first.stop()
