"""The routing bench's pure parts: flags, the seeded trace, statistics, the oracle, the shift."""

from __future__ import annotations

import itertools
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.append(str(BENCH))

from benchkit import routing_model as m  # noqa: E402


def test_the_same_seed_gives_the_same_trace_and_another_seed_another() -> None:
    one = m.poisson_trace(50.0, 10.0, 3, "s:homogeneous:0.8")
    assert one == m.poisson_trace(50.0, 10.0, 3, "s:homogeneous:0.8")
    assert one != m.poisson_trace(50.0, 10.0, 3, "s:homogeneous:0.5")
    assert all(0 <= a.at_s < 10.0 for a in one)
    assert [a.at_s for a in one] == sorted(a.at_s for a in one)


def test_the_trace_is_poisson_at_the_rate_and_splits_evenly_over_gateways() -> None:
    trace = m.poisson_trace(100.0, 200.0, 3, "law")
    assert len(trace) == pytest.approx(20_000, rel=0.03)
    gaps = [b.at_s - a.at_s for a, b in itertools.pairwise(trace)]
    # Exponential gaps: the mean equals the standard deviation (1 / rate).
    assert statistics.mean(gaps) == pytest.approx(0.01, rel=0.03)
    assert statistics.stdev(gaps) == pytest.approx(0.01, rel=0.05)
    for g in range(3):
        share = sum(a.gateway == g for a in trace) / len(trace)
        assert share == pytest.approx(1 / 3, abs=0.015)


def test_providers_parse_with_and_without_weight_and_set_the_offered_rate() -> None:
    specs = m.parse_providers("2:0.4:2, 16:0.4:16,4:0.2")
    assert specs == (
        m.ProviderSpec(2, 0.4, 2),
        m.ProviderSpec(16, 0.4, 16),
        m.ProviderSpec(4, 0.2, 1),
    )
    assert m.offered_rate(specs, 0.5) == pytest.approx(0.5 * (5 + 40 + 20))


@pytest.mark.parametrize(
    ("parse", "text", "flag"),
    [
        (m.parse_providers, "4", "--providers"),
        (m.parse_providers, "4:x", "--providers"),
        (m.parse_providers, "0:0.2", "--providers"),
        (m.parse_providers, "4:0.2:1001", "--providers"),
        (m.parse_providers, "4:nan", "--providers"),
        (lambda t: m.parse_degrade(t, 4), "4:3:10", "--degrade"),
        (lambda t: m.parse_degrade(t, 4), "0:3", "--degrade"),
        (lambda t: m.parse_degrade(t, 4), "0:-1:5", "--degrade"),
        (m.parse_rho, "0", "--rho"),
        (m.parse_rho, "high", "--rho"),
    ],
)
def test_bad_values_name_their_flag(parse: object, text: str, flag: str) -> None:
    with pytest.raises(m.UsageError) as caught:
        parse(text)  # type: ignore[operator]
    assert caught.value.flag == flag
    assert str(caught.value).startswith(flag)


def test_the_script_answers_a_usage_error_with_the_flag_and_no_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-P", str(BENCH / "routing.py"), "--degrade", "9:3:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--degrade" in done.stderr and "Traceback" not in done.stderr


def test_standard_scenarios_are_the_four_of_section_14_at_three_loads() -> None:
    full = m.standard_scenarios(quick=False)
    assert all(s.rhos == (0.5, 0.8, 0.95) for s in full)
    assert all(s.duration_s == m.FULL_DURATION_S for s in full)
    scenarios = {s.name: s for s in m.standard_scenarios(quick=True)}
    assert list(scenarios) == ["homogeneous", "heterogeneous", "degrading", "three_gateways"]
    assert [s.name for s in full] == list(scenarios)
    # Quick runs only the load the targets are stated at.
    assert all(s.rhos == (m.TARGET_RHO,) for s in scenarios.values())
    assert [p.capacity for p in scenarios["heterogeneous"].providers] == [2, 4, 8, 16]
    assert [p.weight for p in scenarios["heterogeneous"].providers] == [2, 4, 8, 16]
    degrade = scenarios["degrading"].degrade
    assert degrade is not None and degrade.factor == 3.0
    assert degrade.at_s == scenarios["degrading"].duration_s / 2
    assert scenarios["three_gateways"].gateways == 3
    assert scenarios["three_gateways"].signal_transport == "poll"


@given(st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=300), st.floats(1, 100))
def test_the_percentile_is_a_member_with_at_least_q_percent_at_or_below(
    values: list[float], q: float
) -> None:
    p = m.percentile(values, q)
    assert p in values
    assert sum(v <= p for v in values) >= q / 100 * len(values)
    assert sum(v < p for v in values) < q / 100 * len(values)


def test_figures_count_errors_and_throughput_and_ratios_compare_leastloaded() -> None:
    latencies = [0.1 * i for i in range(1, 101)] + [None, None]
    figures = m.strategy_figures(latencies, elapsed_s=10.0)
    assert figures == {
        "p50_s": 5.0,
        "p99_s": 9.9,
        "throughput_rps": 10.0,
        "errors": 2,
        "requests": 102,
    }
    row = lambda p99: {"p99_s": p99}  # noqa: E731
    strategies = {
        "leastLoaded": row(1.2),
        "oracle": row(1.0),
        "litellm_simple_shuffle": row(3.0),
        "litellm_least_busy": row(2.0),
        "litellm_latency_based_routing": row(math.nan),
    }
    assert m.cell_summary(strategies) == {
        "p99_ratio_to_oracle": 1.2,
        "p99_ratio_to_best_litellm": 0.6,
        "best_litellm": "litellm_least_busy",
        "p99_ratio_to_litellm_least_busy": 0.6,
    }


def test_the_oracle_joins_the_queue_answered_soonest() -> None:
    # A free slot on the fast provider beats a free slot on a slow one.
    assert m.oracle_pick([0, 0], [4, 4], [0.6, 0.2]) == 1
    # A full fast provider loses to a free slot that is not too slow.
    assert m.oracle_pick([1, 4], [4, 4], [0.2, 0.2]) == 0
    # Capacity counts: 3 outstanding on 16 slots beats 1 on 2 slots that is full.
    assert m.oracle_pick([2, 3], [2, 16], [0.4, 0.4]) == 1
    # Ties go to the lower share of capacity, then the lower index.
    assert m.oracle_pick([1, 1], [2, 4], [0.2, 0.2]) == 1
    assert m.oracle_pick([0, 0], [4, 4], [0.2, 0.2]) == 0


def test_the_shift_is_the_time_until_the_slow_providers_share_halves() -> None:
    samples = []
    counts = [0, 0, 0, 0]
    for tick in range(1, 61):  # 0.2 s samples over 12 s, change at 6 s
        t = tick * 0.2
        slow_share = 1 if t <= 8.0 else 0  # provider 0 gets 1 in 4 until 8 s, then none
        counts = [counts[0] + slow_share, counts[1] + 1, counts[2] + 1, counts[3] + 1]
        samples.append((round(t, 2), list(counts)))
    shift = m.shift_time(samples, 0, 6.0)
    # The trailing 2 s window holds at most half the old share (1/8) from 9.2 s on:
    # (8.0 - 7.2) / 0.2 = 4 slow arrivals of 4 + 30 in (7.2, 9.2], one more tick before.
    assert shift is not None and 3.0 <= shift <= 3.4
    # From 7 s on: 5 slow arrivals (7.2 to 8.0 s) of 5 + 3 * 25.
    assert m.slow_shares(samples, 0, 6.0) == {"before": 0.25, "after": round(5 / 80, 3)}
    steady = [(t, [c[1], c[1], c[2], c[3]]) for t, c in samples]
    assert m.shift_time(steady, 0, 6.0) is None
    assert m.slow_shares(steady, 0, 6.0) == {"before": 0.25, "after": 0.25}
    assert m.shift_time(samples[:1], 0, 6.0) is None
