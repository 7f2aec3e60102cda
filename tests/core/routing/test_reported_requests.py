"""The waiting+running count a provider reports, from scrape to the gateway (§14)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from grid.core.crdt.payload import PayloadLimits, _record, _record_pb
from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.routing.mesh_view import signals_entry
from grid.core.routing.metrics_mapping import MetricFamily, Sample, map_signals
from grid.core.routing.rerank import reported_requests
from grid.core.routing.signals import (
    ProviderSignals,
    SignalsDocument,
    encode_signals,
    parse_signals,
)
from grid.core.vocabulary import BackendKind
from grid.errors import ValidationError


def _gauge(name: str, value: float) -> MetricFamily:
    return MetricFamily(name, "gauge", (Sample(name, {"model_name": "m"}, value),))


def test_the_scrape_counts_waiting_and_running_requests() -> None:
    both = [_gauge("vllm:num_requests_waiting", 3), _gauge("vllm:num_requests_running", 4)]
    scraped = map_signals(both, queue_capacity=16)
    assert scraped.requests == 7 and scraped.values.queue_depth == 3 / 16
    assert map_signals(both[:1], queue_capacity=16).requests == 3
    assert map_signals(both[1:]).requests is None  # no queue source: missing, not 4


def _record_with(requests: float | None) -> ProviderRecord:
    return ProviderRecord(
        name="p",
        cluster="c",
        site="east",
        backend_kind=BackendKind.LOCAL,
        models=("m",),
        observed_at=1_767_225_600.0,
        signals=RecordSignals(queue_depth=0.25, requests=requests),
    )


@pytest.mark.parametrize("requests", [None, 0.0, 7.0])
def test_the_count_travels_in_the_record_and_the_signals_document(
    requests: float | None,
) -> None:
    record = _record_with(requests)
    assert _record(_record_pb(record), PayloadLimits()) == record
    entry = signals_entry(record)
    assert entry.requests == requests
    document = _document(entry)
    wire = encode_signals(document)
    assert ("requests" in wire["providers"][0]) == (requests is not None)
    assert parse_signals(wire) == document


def _document(entry: ProviderSignals) -> SignalsDocument:
    return SignalsDocument("1.0.0", "n", "east", 1, 1, datetime(2026, 1, 1, tzinfo=UTC), (entry,))


def test_a_negative_count_is_refused_and_a_record_checks_it_too() -> None:
    wire = encode_signals(_document(signals_entry(_record_with(2.0))))
    wire["providers"][0]["requests"] = -1
    with pytest.raises(ValidationError, match=r"providers\[0\]\.requests"):
        parse_signals(wire)
    with pytest.raises(ValidationError):
        RecordSignals(requests=-1.0)


@dataclasses.dataclass(frozen=True)
class _Cand:
    kind: str
    name: str
    site: str
    cluster: str
    stable_id: str
    fresh: bool = True
    admission: str = "new_and_existing"
    tier: str | None = "same_site"


def test_candidates_take_the_count_of_their_entry() -> None:
    document = _document(signals_entry(_record_with(5.0)))
    listed = [
        _Cand("inference_model", "m", "east", "c", "with"),
        _Cand("inference_model", "other", "east", "x", "without"),
    ]
    assert reported_requests(listed, document) == {"with": 5.0}
