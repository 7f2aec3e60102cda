"""The supervisor's sum of its workers' /metrics: counters summed and never dropping."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from grid.gateway.worker_metrics import WorkerMetrics


def _worker(routed: int, in_flight: int, tokens: int, reloads: int = 1) -> str:
    return (
        "# HELP grid_gateway_requests_total Client requests by outcome.\n"
        "# TYPE grid_gateway_requests_total counter\n"
        f'grid_gateway_requests_total{{outcome="routed"}} {routed}.0\n'
        "# HELP grid_gateway_upstream_in_flight Attempts in flight.\n"
        "# TYPE grid_gateway_upstream_in_flight gauge\n"
        f'grid_gateway_upstream_in_flight{{cluster="c1"}} {in_flight}.0\n'
        "# HELP grid_gateway_tenant_tokens_total Tokens.\n"
        "# TYPE grid_gateway_tenant_tokens_total counter\n"
        'grid_gateway_tenant_tokens_total{cluster="c1",direction="input",tenant="other"} '
        f"{tokens}.0\n"
        "# HELP grid_gateway_overlay_reloads_total Overlay reloads.\n"
        "# TYPE grid_gateway_overlay_reloads_total counter\n"
        f'grid_gateway_overlay_reloads_total{{result="accepted"}} {reloads}.0\n'
    )


def _values(book: WorkerMetrics, answered: set[int]) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(book.exposition(answered).decode()):
        for sample in family.samples:
            out[sample.name] = sample.value
    return out


def test_counters_and_gauges_are_summed_and_per_gateway_families_are_not() -> None:
    book = WorkerMetrics()
    book.observe(0, _worker(routed=3, in_flight=1, tokens=30, reloads=2))
    book.observe(1, _worker(routed=5, in_flight=2, tokens=50, reloads=2))
    values = _values(book, {0, 1})
    assert values["grid_gateway_requests_total"] == 8
    assert values["grid_gateway_upstream_in_flight"] == 3
    assert values["grid_gateway_tenant_tokens_total"] == 80
    assert values["grid_gateway_overlay_reloads_total"] == 2  # every worker read the same file


def test_a_worker_that_did_not_answer_keeps_its_counters_but_not_its_gauges() -> None:
    book = WorkerMetrics()
    book.observe(0, _worker(routed=3, in_flight=1, tokens=30))
    book.observe(1, _worker(routed=5, in_flight=2, tokens=50))
    values = _values(book, {0})
    assert values["grid_gateway_requests_total"] == 8
    assert values["grid_gateway_upstream_in_flight"] == 1


def test_a_crashed_worker_is_retired_so_the_sum_never_drops() -> None:
    book = WorkerMetrics()
    book.observe(0, _worker(routed=3, in_flight=1, tokens=30))
    book.observe(1, _worker(routed=5, in_flight=2, tokens=50))
    book.retire(1)
    assert _values(book, {0})["grid_gateway_tenant_tokens_total"] == 80
    book.observe(1, _worker(routed=1, in_flight=0, tokens=4))  # its successor, from zero
    values = _values(book, {0, 1})
    assert values["grid_gateway_requests_total"] == 9
    assert values["grid_gateway_tenant_tokens_total"] == 84


def test_saved_counters_are_held_for_the_successor_that_restores_them() -> None:
    book = WorkerMetrics()
    book.observe(0, _worker(routed=3, in_flight=1, tokens=30))
    book.retire(0, frozenset({"grid_gateway_tenant_tokens"}))
    # Until the successor is read, the saved tokens still count, and only once.
    values = _values(book, set())
    assert values["grid_gateway_tenant_tokens_total"] == 30
    assert values["grid_gateway_requests_total"] == 3
    book.observe(0, _worker(routed=0, in_flight=0, tokens=31))  # restored 30, then 1 more
    values = _values(book, {0})
    assert values["grid_gateway_tenant_tokens_total"] == 31
    assert values["grid_gateway_requests_total"] == 3


def test_restored_counters_count_before_any_worker_is_read() -> None:
    key = (
        "grid_gateway_tenant_tokens_total",
        (("cluster", "c1"), ("direction", "input"), ("tenant", "other")),
    )
    book = WorkerMetrics({key: 12.0})
    assert _values(book, set())["grid_gateway_tenant_tokens_total"] == 12
    book.observe(0, _worker(routed=1, in_flight=0, tokens=5))
    assert _values(book, {0})["grid_gateway_tenant_tokens_total"] == 17
