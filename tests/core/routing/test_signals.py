"""The §6 signals document: parsing, validation messages, freshness and merging."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.routing.candidate import SignalValues
from grid.core.routing.signals import is_fresh, merge_entries, parse_signals
from grid.core.vocabulary import BackendKind
from grid.errors import ValidationError
from grid.testing.strategies import json_values


def document() -> dict[str, Any]:
    """A valid scope=grid document with one full and one sparse entry."""
    return {
        "schema_version": "1.0.0",
        "network": "quickstart",
        "site": "east",
        "epoch": 7,
        "sequence": 42,
        "generated_at": "2026-01-01T12:00:00Z",
        "providers": [
            {
                "name": "vllm-east",
                "cluster": "vllm-east",
                "site": "east",
                "backend_kind": "local",
                "models": ["llama-3.1-8b-instruct"],
                "healthy": True,
                "observed_at": "2026-01-01T11:59:50Z",
                "signals": {
                    "queue_depth": 0.25,
                    "kv_cache_utilization": 0.5,
                    "prefix_cache_hit_ratio": 1,
                    "p99_latency_ms": 820,
                    "cost_per_million_input_tokens": 0.0,
                },
            },
            {
                "name": "vllm-west",
                "cluster": "vllm-west",
                "site": "west",
                "backend_kind": "remote",
                "models": [],
                "observed_at": "2026-01-01T11:58:00+00:00",
                "signals": {},
            },
        ],
    }


def test_valid_document_parses_with_absent_keys_missing_not_zero() -> None:
    parsed = parse_signals(document())
    assert parsed.network == "quickstart" and parsed.epoch == 7 and parsed.sequence == 42
    assert parsed.generated_at == datetime(2026, 1, 1, 12, tzinfo=UTC)
    full = parsed.lookup("east", "vllm-east")
    sparse = parsed.lookup("west", "vllm-west")
    assert full is not None and sparse is not None
    assert full.signals == SignalValues(0.25, 0.5, 1.0, 820.0, 0.0)
    assert full.backend_kind is BackendKind.LOCAL and full.healthy is True
    assert sparse.signals == SignalValues()  # every signal missing (None), none zero
    assert sparse.healthy is None
    assert parsed.lookup("east", "vllm-west") is None  # matched by (site, name)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d.pop("generated_at"), "generated_at"),
        (lambda d: d.update(schema_version="2.0.0"), "schema_version"),
        (lambda d: d.update(epoch=-1), "epoch"),
        (lambda d: d.update(sequence=True), "sequence"),
        (lambda d: d.update(generated_at="yesterday"), "generated_at"),
        (lambda d: d.update(generated_at="2026-01-01T12:00:00"), "generated_at"),
        (lambda d: d.update(providers={}), "providers"),
        (lambda d: d["providers"][0]["signals"].update(queue_depth=1.5), "queue_depth"),
        (lambda d: d["providers"][0]["signals"].update(queue_depth="0.5"), "queue_depth"),
        (lambda d: d["providers"][0]["signals"].update(p99_latency_ms=-1), "p99_latency_ms"),
        (lambda d: d["providers"][0]["signals"].update(kv_cache_utilization=float("nan")), "kv"),
        (lambda d: d["providers"][0]["signals"].update(queue_dept=0.1), "queue_dept"),
        (lambda d: d["providers"][1].update(backend_kind="edge"), "backend_kind"),
        (lambda d: d["providers"][1].update(healthy="yes"), "healthy"),
        (lambda d: d["providers"][1].pop("observed_at"), "observed_at"),
        (lambda d: d["providers"][1].update(name="vllm-east", site="east"), "providers[1]"),
    ],
)
def test_invalid_documents_name_the_offending_path(mutate: Any, path: str) -> None:
    doc = copy.deepcopy(document())
    mutate(doc)
    with pytest.raises(ValidationError) as info:
        parse_signals(doc)
    assert path in str(info.value)
    assert info.value.path


def test_non_object_is_refused() -> None:
    with pytest.raises(ValidationError, match="JSON object"):
        parse_signals([])


def test_freshness_is_relative_to_generated_at_with_a_60s_bound() -> None:
    parsed = parse_signals(document())
    entry = parsed.providers[0]
    at = entry.observed_at
    assert is_fresh(entry, at + timedelta(seconds=60))  # exactly 60 s old: still fresh
    assert not is_fresh(entry, at + timedelta(seconds=60, microseconds=1))
    assert is_fresh(entry, at - timedelta(seconds=5))  # a sample from "the future" is fresh
    assert not is_fresh(parsed.providers[1], parsed.generated_at)  # 120 s old


def test_merge_keeps_the_newest_entry_per_site_and_name() -> None:
    own = parse_signals(document()).providers
    pulled_doc = document()
    pulled_doc["providers"][1]["observed_at"] = "2026-01-01T11:59:59Z"
    pulled_doc["providers"][1]["signals"] = {"queue_depth": 0.9}
    pulled_doc["providers"][0]["observed_at"] = "2026-01-01T11:00:00Z"
    pulled = parse_signals(pulled_doc).providers
    merged = merge_entries(own, pulled)
    assert [(e.site, e.name) for e in merged] == [("east", "vllm-east"), ("west", "vllm-west")]
    assert merged[0] is own[0]  # own entry is newer
    assert merged[1] is pulled[1]  # pulled entry is newer


JSON_VALUES = json_values()


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_parse_has_two_outcomes_on_mutated_documents(data: st.DataObject) -> None:
    doc = document()
    paths: list[tuple[Any, Any]] = []

    def collect(node: Any) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            paths.append((node, key))
            if isinstance(value, dict | list):
                collect(value)

    collect(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        node, key = data.draw(st.sampled_from(paths))
        node[key] = data.draw(JSON_VALUES)
    try:
        parse_signals(doc)
    except ValidationError as exc:
        assert exc.path
