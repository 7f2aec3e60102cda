"""Builders for telemetry batches used by the core admission tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import EventBatch, InventoryBatch

NOW_NS = 1_800_000_000 * 1_000_000_000


def event_batch(count: int = 1, observed_ns: int = NOW_NS, **fields: object) -> EventBatch:
    """An EventBatch of ``count`` valid events observed at ``observed_ns``."""
    batch = EventBatch(protocol_version=1, schema_version=1)
    for i in range(count):
        event = batch.events.add(record_id=f"r{i}", type="cpu", payload=b"x")
        event.observed_at.seconds, event.observed_at.nanos = divmod(observed_ns, 1_000_000_000)
        event.attributes["k"] = "v"
    for name, value in fields.items():
        setattr(batch, name, value)
    return batch


def inventory_batch(count: int = 1, observed_ns: int = NOW_NS) -> InventoryBatch:
    """An InventoryBatch of ``count`` valid records observed at ``observed_ns``."""
    batch = InventoryBatch(protocol_version=1, schema_version=1)
    for i in range(count):
        record = batch.records.add(record_id=f"i{i}", type="host")
        record.observed_at.seconds, record.observed_at.nanos = divmod(observed_ns, 1_000_000_000)
    return batch


@pytest.fixture
def make_events() -> Callable[..., EventBatch]:
    """The `event_batch` builder as a fixture."""
    return event_batch
