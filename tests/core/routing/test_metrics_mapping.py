"""Mapping scraped metric families to Grid signals, and the PromQL-style p99."""

from __future__ import annotations

import math

import pytest

from grid.core.resources.provider_spec import SignalNames
from grid.core.routing.metrics_mapping import (
    POOL_LABELS,
    MetricFamily,
    Sample,
    carried_sample,
    histogram_quantile,
    map_signals,
    select_pool,
)

INF = math.inf


def gauge(name: str, value: float, **labels: str) -> MetricFamily:
    return MetricFamily(name, "gauge", (Sample(name, labels, value),))


def counter(name: str, value: float, *, suffix: str = "_total") -> MetricFamily:
    return MetricFamily(
        name, "counter", (Sample(name + suffix, {}, value), Sample(name + "_created", {}, 1.0))
    )


def histogram(name: str, buckets: list[tuple[float, float]], **labels: str) -> MetricFamily:
    samples = [
        Sample(f"{name}_bucket", {**labels, "le": "+Inf" if math.isinf(b) else str(b)}, c)
        for b, c in buckets
    ]
    samples.append(Sample(f"{name}_count", labels, buckets[-1][1]))
    samples.append(Sample(f"{name}_sum", labels, 1.0))
    return MetricFamily(name, "histogram", tuple(samples))


LATENCY = "vllm:e2e_request_latency_seconds"


def test_p99_interpolates_inside_the_bucket_like_promql() -> None:
    # 100 observations; rank 99 falls in (1, 2.5] which holds 10 of them, 9 needed.
    buckets = [(0.1, 10.0), (0.5, 60.0), (1.0, 90.0), (2.5, 100.0), (INF, 100.0)]
    assert histogram_quantile(0.99, buckets) == pytest.approx(1.0 + 1.5 * 9 / 10)
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1 + 0.4 * 40 / 50)


def test_p99_edges_follow_promql() -> None:
    assert histogram_quantile(0.99, [(1.0, 50.0), (INF, 100.0)]) == 1.0  # rank in +Inf
    assert histogram_quantile(0.99, [(0.2, 100.0), (INF, 100.0)]) == pytest.approx(0.198)
    assert histogram_quantile(0.99, [(0.2, 0.0), (INF, 0.0)]) is None  # no observations
    assert histogram_quantile(0.99, [(0.2, 3.0), (1.0, 5.0)]) is None  # no +Inf bucket
    assert histogram_quantile(0.99, [(INF, 5.0)]) is None
    # A non-monotonic count is repaired rather than producing a negative slope.
    assert histogram_quantile(0.5, [(1.0, 10.0), (2.0, 4.0), (INF, 10.0)]) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        histogram_quantile(1.5, [(1.0, 1.0), (INF, 1.0)])


def test_vllm_names_map_to_every_signal() -> None:
    families = [
        gauge("vllm:num_requests_waiting", 0.25),
        gauge("vllm:num_requests_running", 3.0),
        gauge("vllm:kv_cache_usage_perc", 0.42),
        counter("vllm:prefix_cache_queries", 200.0),
        counter("vllm:prefix_cache_hits", 50.0),
        histogram(LATENCY, [(0.1, 10.0), (0.5, 60.0), (1.0, 90.0), (2.5, 100.0), (INF, 100.0)]),
    ]
    scraped = map_signals(families)
    assert scraped.values.queue_depth == 0.25
    assert scraped.values.kv_cache_utilization == 0.42
    assert scraped.values.prefix_cache_hit_ratio == 0.25
    assert scraped.values.p99_latency_ms == pytest.approx(2350.0)
    assert scraped.values.cost_per_million_input_tokens is None
    assert scraped.healthy is None
    assert scraped.problems == ()


def test_prefix_counters_match_with_or_without_total() -> None:
    families = [
        counter("vllm:prefix_cache_queries", 10.0, suffix=""),
        counter("vllm:prefix_cache_hits", 4.0, suffix="_total"),
    ]
    assert map_signals(families).values.prefix_cache_hit_ratio == pytest.approx(0.4)


def test_absent_or_undefined_signals_stay_missing_never_zero() -> None:
    empty = map_signals([])
    assert empty.values.queue_depth is None
    assert empty.values.kv_cache_utilization is None
    assert empty.values.prefix_cache_hit_ratio is None
    assert empty.values.p99_latency_ms is None
    idle = map_signals(
        [
            counter("vllm:prefix_cache_queries", 0.0),
            counter("vllm:prefix_cache_hits", 0.0),
            histogram(LATENCY, [(0.1, 0.0), (1.0, 0.0), (INF, 0.0)]),
            gauge("vllm:kv_cache_usage_perc", math.nan),
        ]
    )
    assert idle.values.prefix_cache_hit_ratio is None
    assert idle.values.p99_latency_ms is None
    assert idle.values.kv_cache_utilization is None


def test_queue_capacity_turns_a_raw_queue_into_a_capped_ratio() -> None:
    five = [gauge("vllm:num_requests_waiting", 5.0)]
    assert map_signals(five, queue_capacity=20).values.queue_depth == 0.25
    many = [gauge("vllm:num_requests_waiting", 50.0)]
    assert map_signals(many, queue_capacity=20).values.queue_depth == 1.0


def test_a_raw_queue_without_capacity_is_reported_not_guessed() -> None:
    scraped = map_signals([gauge("vllm:num_requests_waiting", 3.0)])
    assert scraped.values.queue_depth is None
    assert scraped.problems == (
        "queue depth 3 is not a ratio in [0, 1]; set metricsConfig.queueCapacity",
    )
    assert map_signals([gauge("vllm:num_requests_waiting", 0.0)]).values.queue_depth == 0.0


def test_series_of_several_engines_are_combined() -> None:
    families = [
        MetricFamily(
            "vllm:num_requests_waiting",
            "gauge",
            (
                Sample("vllm:num_requests_waiting", {"engine": "0"}, 2.0),
                Sample("vllm:num_requests_waiting", {"engine": "1"}, 4.0),
            ),
        ),
        MetricFamily(
            "vllm:kv_cache_usage_perc",
            "gauge",
            (
                Sample("vllm:kv_cache_usage_perc", {"engine": "0"}, 0.2),
                Sample("vllm:kv_cache_usage_perc", {"engine": "1"}, 0.6),
            ),
        ),
        histogram(LATENCY, [(1.0, 50.0), (INF, 50.0)], engine="0"),
        histogram(LATENCY, [(1.0, 0.0), (INF, 50.0)], engine="1"),
    ]
    scraped = map_signals(families, queue_capacity=12)
    assert scraped.values.queue_depth == pytest.approx(0.5)
    assert scraped.values.kv_cache_utilization == pytest.approx(0.4)
    # Summed by le: (1.0, 50), (+Inf, 100): the p99 rank lands in +Inf -> 1.0 s.
    assert scraped.values.p99_latency_ms == pytest.approx(1000.0)


def test_p99_covers_observations_since_the_previous_scrape() -> None:
    before = [(0.1, 0.0), (1.0, 0.0), (5.0, 100.0), (INF, 100.0)]
    after = [(0.1, 100.0), (1.0, 100.0), (5.0, 200.0), (INF, 200.0)]
    first = map_signals([histogram(LATENCY, before)])
    assert first.values.p99_latency_ms == pytest.approx(1000 + 4000 * 99 / 100)
    second = map_signals(
        [histogram(LATENCY, after)], previous_latency_buckets=first.latency_buckets
    )
    # Only the 100 new, fast observations count: rank 99 of 100 in (0, 0.1].
    assert second.values.p99_latency_ms == pytest.approx(99.0)
    idle = map_signals([histogram(LATENCY, after)], previous_latency_buckets=second.latency_buckets)
    assert idle.values.p99_latency_ms == pytest.approx(1000 + 4000 * 98 / 100)  # cumulative
    reset = map_signals(
        [histogram(LATENCY, [(0.1, 1.0), (1.0, 1.0), (5.0, 1.0), (INF, 1.0)])],
        previous_latency_buckets=second.latency_buckets,
    )
    assert reset.values.p99_latency_ms == pytest.approx(99.0)


def test_custom_signal_names_and_health_gauge() -> None:
    names = SignalNames.model_validate(
        {
            "queueDepth": "backend_queue_ratio",
            "kvCacheUtilization": "backend_kv_used",
            "prefixCacheHitRatio": "backend_cache_hits/backend_cache_lookups",
            "latencyP99Ms": "backend_p99_ms",
            "healthy": "backend_up",
        }
    )
    families = [
        gauge("backend_queue_ratio", 0.1),
        gauge("backend_kv_used", 0.9),
        counter("backend_cache_hits", 3.0),
        counter("backend_cache_lookups", 4.0),
        gauge("backend_p99_ms", 180.0),
        gauge("backend_up", 0.0),
        gauge("vllm:num_requests_waiting", 0.99),
    ]
    scraped = map_signals(families, names)
    assert scraped.values.queue_depth == 0.1
    assert scraped.values.kv_cache_utilization == 0.9
    assert scraped.values.prefix_cache_hit_ratio == 0.75
    assert scraped.values.p99_latency_ms == 180.0
    assert scraped.healthy is False
    assert map_signals([gauge("backend_up", 1.0)], names).healthy is True
    assert map_signals([], names).healthy is None


def test_pool_selection_keeps_only_that_pools_series() -> None:
    samples = [
        Sample("vllm:num_requests_waiting", {label: pool}, value)
        for label in POOL_LABELS
        for pool, value in (("a", 1.0), ("b", 2.0))
    ]
    samples.append(Sample("vllm:num_requests_waiting", {}, 9.0))
    (family,) = select_pool(
        [MetricFamily("vllm:num_requests_waiting", "gauge", tuple(samples))], "a"
    )
    assert [s.value for s in family.samples] == [1.0] * len(POOL_LABELS)


@pytest.mark.parametrize(
    ("last", "now", "stale", "carried"),
    [
        (100.0, 100.5, 1, True),
        (100.0, 101.0, 1, False),
        (100.0, 100.5, None, False),
        (None, 100.0, 60, False),
    ],
)
def test_a_sample_older_than_stale_metrics_seconds_is_not_carried(
    last: float | None, now: float, stale: int | None, carried: bool
) -> None:
    assert carried_sample(last, now, stale) is carried
