"""`SampleClock` answers exactly what `sample_clock` does, for any sample and time.

The render cache asks the clock about every sample of every round, so it
compares each ``observed_at`` with two instants taken once per view; this
holds those comparisons to the age arithmetic they stand in for, on both sides
of each boundary, in any time zone and for any TTL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from grid.core.resources import API_VERSION, GridNetwork
from grid.core.routing.candidate import SignalValues
from grid.core.routing.candidate_draft import DraftView, SampleClock, sample_clock
from grid.core.routing.signals import ProviderSignals, SignalsDocument

NETWORK = GridNetwork.model_validate(
    {
        "apiVersion": API_VERSION,
        "kind": "GridNetwork",
        "metadata": {"name": "mesh"},
        "spec": {"gatewayRefs": [{"name": "edge", "namespace": "grid"}]},
    }
)
START = datetime(2026, 1, 1, tzinfo=UTC)
zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5, minutes=-30))]
)
# Ages around the 60 s freshness bound and the TTLs, to the microsecond.
ages = st.one_of(
    st.sampled_from([-1, 0, 59, 60, 61, 299, 300, 301]).map(lambda s: timedelta(seconds=s)),
    st.integers(-(10**6), 10**9).map(lambda us: timedelta(microseconds=us)),
    st.sampled_from([60, 300]).flatmap(
        lambda s: st.integers(-2, 2).map(lambda us: timedelta(seconds=s, microseconds=us))
    ),
)


def _view(generated_at: datetime | None, ttl: int | None) -> DraftView:
    signals = None
    if generated_at is not None:
        signals = SignalsDocument("v1", "mesh", "s0", 1, 1, generated_at, ())
    return DraftView(NETWORK, "s0", "s0", {}, (), signals, {}, {}, ttl)


def _entry(observed_at: datetime) -> ProviderSignals:
    return ProviderSignals("p", "c", "s1", "local", ("m",), True, observed_at, SignalValues())


@given(
    st.integers(-(10**9), 10**9).map(lambda s: START + timedelta(seconds=s)),
    zones,
    zones,
    ages,
    st.one_of(st.none(), st.sampled_from([0, 1, 60, 300, 10**9])),
    st.sampled_from(["s0", "s1"]),
)
def test_the_clock_of_a_view_is_sample_clock(
    generated: datetime,
    generated_zone: timezone,
    observed_zone: timezone,
    age: timedelta,
    ttl: int | None,
    site: str,
) -> None:
    view = _view(generated.astimezone(generated_zone), ttl)
    entry = _entry((generated - age).astimezone(observed_zone))
    assert SampleClock(view)(entry, site) == sample_clock(entry, site, view)


def test_no_sample_or_no_signals_is_neither_stale_nor_evicted() -> None:
    entry = _entry(START - timedelta(days=1))
    assert SampleClock(_view(None, 60))(entry, "s1") == (False, False)
    assert SampleClock(_view(START, 60))(None, "s1") == (False, False)


def test_the_edge_of_the_calendar_still_answers() -> None:
    early = datetime.min.replace(tzinfo=UTC) + timedelta(seconds=30)
    view = _view(early, 300)
    entry = _entry(early)
    assert SampleClock(view)(entry, "s1") == sample_clock(entry, "s1", view) == (False, False)
