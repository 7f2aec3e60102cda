"""Reporter slots go by age: a gateway that takes a new ID on every restart cannot
fill the 64 persisted reporters for good."""

from __future__ import annotations

import datetime as dt

import pytest
from prometheus_client import CollectorRegistry

from grid.core.signals.feedback import Report, ReporterCapacity
from grid.operator.feedback_writer import FeedbackEvents, FeedbackSettings, FeedbackWriter

from .feedback_harness import NETWORK, network_store

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


async def test_restarts_under_new_ids_reuse_idle_slots_and_are_counted() -> None:
    store, registry = await network_store(), CollectorRegistry()
    settings = FeedbackSettings(reporter_capacity=64, reporter_idle_s=3600)
    writer = FeedbackWriter(store, NETWORK, FeedbackEvents(registry), settings)
    for restart in range(64):  # one ID per restart, 30 s apart
        await writer.submit(
            Report(f"gw-{restart}", "r", 1, 1, 0, True), T0 + dt.timedelta(seconds=30 * restart)
        )
    with pytest.raises(ReporterCapacity):
        await writer.submit(Report("gw-64", "r", 1, 1, 0, True), T0 + dt.timedelta(seconds=30 * 64))
    later = T0 + dt.timedelta(hours=1, seconds=45)  # gw-0 and gw-1 are idle
    for restart in (65, 66):
        await writer.submit(Report(f"gw-{restart}", "r", 1, 1, 0, True), later)
    with pytest.raises(ReporterCapacity):
        await writer.submit(Report("gw-67", "r", 1, 1, 0, True), later)
    status = (await store.get("GridNetwork", NETWORK))["status"]["gatewayFeedback"]
    names = {r["reporter"] for r in status["reporters"]}
    assert len(names) == 64 and not {"gw-0", "gw-1"} & names and {"gw-65", "gw-66"} <= names
    evicted = registry.get_sample_value("grid_gateway_feedback_reporters_evicted_total")
    assert evicted == 2
    overflow = registry.get_sample_value(
        "grid_gateway_feedback_events_total", {"event": "overflow"}
    )
    assert overflow == 2
