"""Remote providers and signals entries patched from the last round are the ones built afresh.

Random rounds replace, requeue, reroute (another cluster or model under the
same name), add and remove live records at their places, drawn from
a small domain: names that repeat (so one record shadows another), clusters and
models that collide (so a record is dropped for a route already taken),
records of the own site, and records that break a resource rule. After each
round `mesh_inputs` and `signals_document` through `RecordViews`
(`grid.core.routing.record_cache`) must give exactly what they give without them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.core.routing.test_mesh_view import network, sites

from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.resources import API_VERSION, InferenceProvider
from grid.core.routing.mesh_view import (
    OriginRecord,
    RecordViews,
    mesh_inputs,
    signals_document,
)

OWN = "east"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
OWN_PROVIDER = InferenceProvider.model_validate(
    {
        "apiVersion": API_VERSION,
        "kind": "InferenceProvider",
        "metadata": {"name": "own"},
        "spec": {
            "gridNetworkRef": "grid-test",
            "backendKind": "local",
            "providerKind": "self_hosted",
            "models": [{"name": "llama"}],
            "routingClusterRef": "c0",
        },
    }
)


def _record(origin: str, name: str, cluster: str, model: str, queue: float) -> OriginRecord:
    return OriginRecord(
        origin,
        name,
        ProviderRecord(
            name=name,
            cluster=cluster,
            site=origin,
            backend_kind="local",
            models=(model,),
            healthy=True,
            observed_at=1.0,
            signals=RecordSignals(queue_depth=queue),
            phase="Available",
        ),
    )


record = st.builds(
    _record,
    st.sampled_from(["east", "central", "west"]),
    st.sampled_from(["p1", "p2", "p3", "own", "Not_A_Name"]),
    st.sampled_from(["c0", "c1", "c2"]),
    st.sampled_from(["llama", "qwen"]),
    st.sampled_from([0.0, 0.5]),
)
step = st.one_of(
    st.tuples(st.just("replace"), st.integers(0, 20), record),
    st.tuples(st.just("requeue"), st.integers(0, 20), st.sampled_from([0.1, 0.9])),
    st.tuples(
        st.just("reroute"),
        st.integers(0, 20),
        st.sampled_from(["c0", "c1", "c2"]),
        st.sampled_from(["llama", "qwen"]),
    ),
    st.tuples(st.just("add"), st.integers(0, 20), record),
    st.tuples(st.just("remove"), st.integers(0, 20)),
    st.just(("same",)),
)


def _apply(records: list[OriginRecord], change: tuple[Any, ...]) -> None:
    at = change[1] % len(records) if len(change) > 1 and records else 0
    match change[0]:
        case "replace" if records:
            records[at] = change[2]
        case "requeue" if records:
            r = records[at].record
            records[at] = _record(records[at].origin, r.name, r.cluster, r.models[0], change[2])
        case "reroute" if records:
            r = records[at].record
            records[at] = _record(records[at].origin, r.name, change[2], change[3], 0.0)
        case "add":
            records.insert(at, change[2])
        case "remove" if records:
            del records[at]


@settings(max_examples=300)
@given(st.lists(record, max_size=12), st.lists(step, min_size=1, max_size=20))
def test_patched_remote_providers_are_the_ones_built_afresh(
    first: list[OriginRecord], steps: list[tuple[Any, ...]]
) -> None:
    records, views = list(first), RecordViews()
    grid, members, own = network(), sites(), [OWN_PROVIDER]
    for change in [("same",), *steps]:
        _apply(records, change)
        kept = mesh_inputs(grid, members, own, [], records, OWN, views=views)
        views.next_round()
        scratch = mesh_inputs(grid, members, own, [], records, OWN)
        assert kept.providers == scratch.providers, change


@settings(max_examples=300)
@given(st.lists(record, max_size=12), st.lists(step, min_size=1, max_size=20))
def test_patched_signals_entries_are_the_ones_sorted_afresh(
    first: list[OriginRecord], steps: list[tuple[Any, ...]]
) -> None:
    records, views = list(first), RecordViews()
    for change in [("same",), *steps]:
        _apply(records, change)
        args = ("grid-test", OWN, records)
        kept = signals_document(*args, now=NOW, epoch=1, sequence=1, views=views)
        views.next_round()
        scratch = signals_document(*args, now=NOW, epoch=1, sequence=1)
        assert kept == scratch, change


def test_a_requeued_record_is_patched_in_place() -> None:
    records = [_record("west", f"p{i}", f"c{i}", "llama", 0.0) for i in range(1, 9)]
    views, grid, members = RecordViews(), network(), sites()
    first = mesh_inputs(grid, members, [OWN_PROVIDER], [], records, OWN, views=views)
    records[3] = _record("west", "p4", "c4", "llama", 0.7)
    second = mesh_inputs(grid, members, [OWN_PROVIDER], [], records, OWN, views=views)
    assert [a is b for a, b in zip(first.providers, second.providers, strict=True)] == [
        True,
        True,
        True,
        True,
        False,
        True,
        True,
        True,
        True,
    ]
