"""Properties of the token bucket and the capacity ledger under arbitrary request sequences."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.telemetry.bucket import AgentBuckets
from grid.core.telemetry.capacity import CapacityLedger, Reservation
from grid.core.telemetry.refusals import GatewayAtCapacity


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0.5, 50),
    st.integers(1, 20),
    st.lists(st.floats(0, 2), min_size=1, max_size=200),
)
def test_an_agent_never_gets_more_than_burst_plus_rate_times_elapsed(
    rate: float, burst: int, gaps: list[float]
) -> None:
    buckets = AgentBuckets(rate, burst)
    now, granted = 0.0, 0
    for gap in gaps:
        now += gap
        if buckets.take("agent", now) == 0:
            granted += 1
        assert granted <= burst + rate * now + 1e-9


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.one_of(st.none(), st.integers(0, 300))), max_size=100))
def test_capacity_never_exceeds_its_bounds_and_releases_restore_it(
    steps: list[tuple[bool, int | None]],
) -> None:
    ledger = CapacityLedger(held_body_bytes_max=1000, requests_in_flight_max=5)
    held: list[Reservation] = []
    for release, length in steps:
        if release and held:
            ledger.release(held.pop(0))
            continue
        with contextlib.suppress(GatewayAtCapacity):
            held.append(ledger.reserve(length, 200))
        assert ledger.held_body_bytes <= 1000 and ledger.requests_in_flight <= 5
        assert ledger.held_body_bytes == sum(r.body_bytes for r in held)
    for reservation in held:
        ledger.release(reservation)
    assert (ledger.held_body_bytes, ledger.requests_in_flight) == (0, 0)
