"""Per-agent token buckets and aggregate capacity reservations."""

from __future__ import annotations

import pytest

from grid.core.telemetry.bucket import AgentBuckets
from grid.core.telemetry.capacity import CapacityLedger
from grid.core.telemetry.refusals import GatewayAtCapacity

MIB = 1024 * 1024


def test_bucket_allows_burst_then_paces_at_rate() -> None:
    buckets = AgentBuckets(rate=2.0, burst=3)
    assert [buckets.take("a", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a", 0.0) == pytest.approx(0.5)
    assert buckets.take("a", 0.5) == 0.0
    assert buckets.take("b", 0.5) == 0.0  # another agent has its own budget


def test_full_buckets_are_pruned_and_recreated_full() -> None:
    buckets = AgentBuckets(rate=1.0, burst=2)
    buckets.take("a", 0.0)
    assert buckets.prune(0.5) == 0
    assert buckets.prune(1.0) == 1 and len(buckets) == 0


def test_capacity_reserves_content_length_capped_at_the_body_limit() -> None:
    ledger = CapacityLedger(held_body_bytes_max=128 * MIB, requests_in_flight_max=10)
    small = ledger.reserve(1000, 8 * MIB)
    huge = ledger.reserve(100 * MIB, 8 * MIB)
    chunked = ledger.reserve(None, 8 * MIB)
    assert (small.body_bytes, huge.body_bytes, chunked.body_bytes) == (1000, 8 * MIB, 8 * MIB)
    assert ledger.held_body_bytes == 1000 + 16 * MIB and ledger.requests_in_flight == 3
    for r in (small, huge, chunked):
        ledger.release(r)
    assert ledger.held_body_bytes == 0 and ledger.requests_in_flight == 0


def test_capacity_refuses_when_the_aggregate_would_overflow() -> None:
    ledger = CapacityLedger(
        held_body_bytes_max=10 * MIB, requests_in_flight_max=10, retry_after_s=3
    )
    ledger.reserve(8 * MIB, 8 * MIB)
    with pytest.raises(GatewayAtCapacity) as info:
        ledger.reserve(3 * MIB, 8 * MIB)
    assert info.value.status == 503 and info.value.retry_after_seconds == 3
    assert ledger.held_body_bytes == 8 * MIB and ledger.requests_in_flight == 1


def test_capacity_bounds_the_request_count() -> None:
    ledger = CapacityLedger(held_body_bytes_max=MIB, requests_in_flight_max=2)
    ledger.reserve(1, MIB)
    ledger.reserve(1, MIB)
    with pytest.raises(GatewayAtCapacity, match="requests in flight"):
        ledger.reserve(1, MIB)
