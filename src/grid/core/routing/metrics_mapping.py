"""From scraped Prometheus metric families to a provider's Grid signals.

The scraper adapter fetches a provider's ``/metrics`` and parses the text format;
this module does the rest without I/O. It resolves each signal's source name from
``metricsConfig.signalNames`` (vLLM's names by default, SPEC-DECISIONS §2):

- a gauge or counter name yields its value (``name`` and ``name_total`` both match);
- ``numerator/denominator`` yields the ratio of two counters, such as
  ``vllm:prefix_cache_hits/vllm:prefix_cache_queries``;
- a histogram name yields its p99 by linear interpolation inside the bucket, as
  PromQL's ``histogram_quantile`` does, in milliseconds when the metric is in seconds.

A source that is absent, not a number, or undefined (no observations, no queries)
leaves the signal missing, never 0: the scorer treats missing as neutral. Several
series of one metric (one per engine, say) are combined: counts and counters are
summed, utilization gauges averaged, and histogram buckets summed by ``le``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from grid.core.resources.provider_spec import SignalNames
from grid.core.routing.candidate import SignalValues

LATENCY_QUANTILE = 0.99
"""The quantile reported as ``p99_latency_ms``."""

RUNNING_SOURCE = "vllm:num_requests_running"
"""Requests being served, added to the raw queue depth for ``ScrapedSignals.requests``."""


@dataclass(frozen=True)
class Sample:
    """One sample line: the full sample name (with ``_total``, ``_bucket``...), labels, value."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class MetricFamily:
    """A parsed metric family: its base name, type and samples."""

    name: str
    type: str
    samples: tuple[Sample, ...]


Buckets = tuple[tuple[float, float], ...]
"""Cumulative histogram buckets as ``(upper bound, count)``, ascending, ending at +Inf."""


@dataclass(frozen=True)
class ScrapedSignals:
    """What one scrape says about a provider.

    ``values`` has ``cost_per_million_input_tokens`` unset: cost comes from the spec.
    ``latency_buckets`` is kept by the scraper and passed back next time, so the
    p99 covers the observations since the previous scrape. ``problems`` are
    one-line reasons a configured source could not be used.
    """

    values: SignalValues
    healthy: bool | None = None
    latency_buckets: Buckets | None = None
    problems: tuple[str, ...] = field(default=())
    requests: float | None = None
    """Requests waiting and running, a count: the raw queue depth source (when it
    is a plain metric, not a ratio) plus `RUNNING_SOURCE` where the provider has it."""


POOL_LABELS = ("name", "pool", "pool_name", "model_name")
"""Labels `select_pool` compares with ``metricsConfig.poolName`` (upstream reads ``name``)."""


def select_pool(families: Iterable[MetricFamily], pool: str) -> list[MetricFamily]:
    """The families with only the series of pool ``pool``: those with a `POOL_LABELS`
    label equal to it. A series without such a label belongs to no pool and is dropped,
    so one engine's load never stands for another's."""
    return [
        MetricFamily(
            family.name,
            family.type,
            tuple(s for s in family.samples if any(s.labels.get(k) == pool for k in POOL_LABELS)),
        )
        for family in families
    ]


def carried_sample(
    last_at_s: float | None, now_s: float, stale_metrics_seconds: int | None
) -> bool:
    """Whether the last good sample (taken at ``last_at_s``) still stands in for a
    failed scrape at ``now_s``: only with ``staleMetricsSeconds`` and while younger
    than it. An older sample counts as missing (upstream Grid's rule)."""
    if stale_metrics_seconds is None or last_at_s is None:
        return False
    return now_s - last_at_s < stale_metrics_seconds


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative buckets, interpolated linearly like PromQL.

    Returns None when undefined: fewer than two buckets, no +Inf bucket, or no
    observations. A rank in the +Inf bucket yields the highest finite bound.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError("a quantile must be within [0, 1]")
    ordered = sorted(buckets)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return None
    # Counts must not decrease with the bound; repair as PromQL does.
    monotonic: list[tuple[float, float]] = []
    running = 0.0
    for bound, count in ordered:
        running = max(running, count)
        monotonic.append((bound, running))
    total = monotonic[-1][1]
    if total <= 0:
        return None
    rank = q * total
    index = next(i for i, (_, count) in enumerate(monotonic) if count >= rank)
    if index == len(monotonic) - 1:
        return monotonic[-2][0]
    upper, count = monotonic[index]
    if index == 0:
        if upper <= 0:
            return upper
        lower, below = 0.0, 0.0
    else:
        lower, below = monotonic[index - 1]
    in_bucket = count - below
    if in_bucket <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / in_bucket


def _series(families: Iterable[MetricFamily], name: str) -> list[Sample]:
    """Scalar samples of a metric, matching ``name`` with or without ``_total``."""
    base = name.removesuffix("_total")
    wanted = {base, f"{base}_total"}
    found: list[Sample] = []
    for family in families:
        if family.type in ("histogram", "summary", "gaugehistogram"):
            continue
        found.extend(s for s in family.samples if s.name in wanted and math.isfinite(s.value))
    return found


def _histogram(families: Iterable[MetricFamily], name: str) -> Buckets | None:
    """Buckets of a histogram summed by ``le`` across series, or None if absent."""
    totals: dict[float, float] = {}
    bucket_name = f"{name}_bucket"
    for family in families:
        for sample in family.samples:
            if sample.name != bucket_name or "le" not in sample.labels:
                continue
            try:
                bound = float(sample.labels["le"])
            except ValueError:
                continue
            if math.isnan(bound) or not math.isfinite(sample.value):
                continue
            totals[bound] = totals.get(bound, 0.0) + sample.value
    return tuple(sorted(totals.items())) if totals else None


def _window(current: Buckets, previous: Buckets | None) -> Buckets:
    """Observations since the previous scrape, or all of them after a reset or idle spell."""
    if previous is None or [b for b, _ in previous] != [b for b, _ in current]:
        return current
    delta = tuple(
        (b, now - before) for (b, now), (_, before) in zip(current, previous, strict=True)
    )
    if any(count < 0 for _, count in delta) or delta[-1][1] <= 0:
        return current
    return delta


def _latency_ms(
    families: Sequence[MetricFamily], name: str, previous: Buckets | None
) -> tuple[float | None, Buckets | None]:
    buckets = _histogram(families, name)
    scale = 1000.0 if name.endswith("_seconds") else 1.0
    if buckets is None:
        series = _series(families, name)
        value = max((s.value for s in series), default=None)
        return (None if value is None or value < 0 else value * scale), None
    quantile = histogram_quantile(LATENCY_QUANTILE, _window(buckets, previous))
    return (None if quantile is None else quantile * scale), buckets


def _sum(families: Sequence[MetricFamily], name: str) -> float | None:
    series = _series(families, name)
    return sum(s.value for s in series) if series else None


def _mean(families: Sequence[MetricFamily], name: str) -> float | None:
    series = _series(families, name)
    return sum(s.value for s in series) / len(series) if series else None


def _ratio_source(families: Sequence[MetricFamily], source: str) -> float | None:
    """A ``numerator/denominator`` source, or a plain gauge that already is a ratio."""
    if "/" not in source:
        return _mean(families, source)
    numerator, denominator = source.split("/", 1)
    top, bottom = _sum(families, numerator), _sum(families, denominator)
    if top is None or bottom is None or bottom <= 0:
        return None
    return min(1.0, max(0.0, top / bottom))


def _as_ratio(
    value: float | None, label: str, problems: list[str], capacity: int | None = None
) -> float | None:
    """Clamp a ratio into [0, 1]; a value above 1 without a capacity is unusable."""
    if value is None:
        return None
    if capacity is not None:
        return min(1.0, max(0.0, value / capacity))
    if value > 1.0:
        hint = "; set metricsConfig.queueCapacity" if label == "queue depth" else ""
        problems.append(f"{label} {value:g} is not a ratio in [0, 1]{hint}")
        return None
    return max(0.0, value)


def source_families(names: SignalNames) -> tuple[str, ...]:
    """The metric names `map_signals` reads under ``names`` (each without ``_total``, and
    `RUNNING_SOURCE`): an exposition line whose name starts with none of them cannot
    change what it maps."""
    sources = [names.queue_depth, names.kv_cache_utilization, names.prefix_cache_hit_ratio]
    sources += [names.latency_p99_ms, *([names.healthy] if names.healthy else [])]
    parts = {part.removesuffix("_total") for source in sources for part in source.split("/")}
    return tuple(sorted(parts | {RUNNING_SOURCE}))


def map_signals(
    families: Sequence[MetricFamily],
    names: SignalNames | None = None,
    *,
    queue_capacity: int | None = None,
    previous_latency_buckets: Buckets | None = None,
) -> ScrapedSignals:
    """Map one scrape's metric families to Grid signals (see the module docstring).

    ``queue_capacity`` turns a raw queue length into ``min(1, raw / capacity)``;
    without it the source must already be a ratio, and a larger value is reported
    in ``problems`` and left missing rather than guessed.
    """
    names = names or SignalNames()
    problems: list[str] = []
    raw_queue = _sum(families, names.queue_depth) if "/" not in names.queue_depth else None
    requests = None if raw_queue is None else raw_queue + (_sum(families, RUNNING_SOURCE) or 0.0)
    queue = _as_ratio(
        raw_queue if "/" not in names.queue_depth else _ratio_source(families, names.queue_depth),
        "queue depth",
        problems,
        queue_capacity,
    )
    kv_cache = _as_ratio(
        _ratio_source(families, names.kv_cache_utilization), "kv cache utilization", problems
    )
    prefix = _as_ratio(
        _ratio_source(families, names.prefix_cache_hit_ratio), "prefix cache hit ratio", problems
    )
    p99_ms, buckets = _latency_ms(families, names.latency_p99_ms, previous_latency_buckets)
    healthy: bool | None = None
    if names.healthy is not None:
        series = _series(families, names.healthy)
        healthy = all(s.value != 0 for s in series) if series else None
    values = SignalValues(
        queue_depth=queue,
        kv_cache_utilization=kv_cache,
        prefix_cache_hit_ratio=prefix,
        p99_latency_ms=p99_ms,
    )
    return ScrapedSignals(
        values, healthy, buckets, tuple(problems), None if requests is None else max(0.0, requests)
    )
