"""Parsing only the families the signals read maps to the same signals as parsing all."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.adapters.scrape import ScrapeError, only_families, parse_exposition
from grid.core.resources.provider_spec import SignalNames
from grid.core.routing.metrics_mapping import (
    RUNNING_SOURCE,
    map_signals,
    select_pool,
    source_families,
)

READ = [
    "vllm:num_requests_waiting",
    RUNNING_SOURCE,
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_hits",
    "vllm:prefix_cache_queries",
]
"""Families the default signal names read, plus near misses and others that they do not."""
OTHERS = [
    "vllm:num_requests_waiting_by_reason",
    "vllm:num_requests_wait",
    "python_gc_objects_collected",
    "process_cpu_seconds",
    "http_requests",
    "queue_depth_custom",
]
LATENCY = "vllm:e2e_request_latency_seconds"
NAMES = [
    SignalNames(),
    SignalNames(queue_depth="queue_depth_custom", healthy="http_requests_total"),
    SignalNames(kv_cache_utilization="vllm:num_requests_wait_total/process_cpu_seconds"),
]

values = st.floats(min_value=0, max_value=1e6, allow_nan=False)
pools = st.sampled_from(["a", "b"])


@st.composite
def family(draw: st.DrawFn, name: str) -> str:
    kind = draw(st.sampled_from(["gauge", "counter", "untyped"]))
    lines = [f"# HELP {name} some help", f"# TYPE {name} {kind}"]
    sample = f"{name}_total" if kind == "counter" else name
    for pool in draw(st.lists(pools, min_size=1, max_size=2, unique=True)):
        lines.append(f'{sample}{{model_name="{pool}"}} {draw(values)}')
    return "\n".join(lines)


@st.composite
def histogram(draw: st.DrawFn) -> str:
    lines = [f"# HELP {LATENCY} latency", f"# TYPE {LATENCY} histogram"]
    counts = sorted(draw(st.lists(st.integers(0, 1000), min_size=3, max_size=3)))
    for le, count in zip(("0.1", "1.0", "+Inf"), counts, strict=True):
        lines.append(f'{LATENCY}_bucket{{le="{le}",model_name="a"}} {count}')
    lines += [f'{LATENCY}_sum{{model_name="a"}} {draw(values)}']
    lines += [f'{LATENCY}_count{{model_name="a"}} {counts[-1]}']
    return "\n".join(lines)


@st.composite
def expositions(draw: st.DrawFn) -> str:
    names = draw(st.lists(st.sampled_from(READ + OTHERS), unique=True))
    parts = [draw(family(name)) for name in names]
    if draw(st.booleans()):
        parts.append(draw(histogram()))
    return "\n".join(draw(st.permutations(parts))) + "\n"


@settings(max_examples=300, deadline=None)
@given(expositions(), st.sampled_from(NAMES), st.sampled_from([None, "a"]))
def test_the_families_read_map_as_the_whole_exposition_does(
    text: str, names: SignalNames, pool: str | None
) -> None:
    wanted = source_families(names)
    whole, only = parse_exposition(text), parse_exposition(text, wanted)
    if pool is not None:
        whole, only = select_pool(whole, pool), select_pool(only, pool)
    assert map_signals(only, names, queue_capacity=8) == map_signals(whole, names, queue_capacity=8)
    assert {f.name for f in only} <= {f.name for f in whole}


def test_lines_of_other_families_are_left_out_and_a_non_exposition_still_fails() -> None:
    text = (
        "# HELP python_gc_objects_collected_total collected\n"
        "# TYPE python_gc_objects_collected_total counter\n"
        'python_gc_objects_collected_total{generation="0"} 5\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting 3\n"
    )
    kept = only_families(text, source_families(SignalNames()))
    assert kept == "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n"
    with pytest.raises(ScrapeError):
        parse_exposition("garbage {{{\n", source_families(SignalNames()))
