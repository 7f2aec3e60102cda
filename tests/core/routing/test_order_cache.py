"""A rank order kept from the last round (`OrderCache`) is the order sorted afresh.

Random rounds add, remove, replace and move groups of candidates (one
provider's models each) drawn from a small domain, so that equal sort keys,
NaN-free ties between kinds, unhealthy and excluded members and reordered
inputs all occur; after each round the kept order must rank and exclude
exactly as `order_candidates` does from scratch.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.routing.candidate import CandidateInput, Geography, SignalValues
from grid.core.routing.ranking import order_candidates
from grid.core.routing.render_cache import RenderCache
from grid.core.routing.scoring import AdmissionThresholds, ScoringConfig, ScoringContext
from grid.core.vocabulary import RoutingPolicy

START = datetime(2026, 1, 1, tzinfo=UTC)
GEOGRAPHIES = {"s0": Geography("r0", "r0-a"), "s1": Geography("r0", "r0-b"), "s2": None}


def _group(fields: dict[str, Any]) -> tuple[CandidateInput, ...]:
    observed = None if fields["age"] is None else START - timedelta(seconds=fields["age"])
    return tuple(
        CandidateInput(
            name=model,
            site=fields["site"],
            cluster=fields["cluster"],
            provider=fields["cluster"],
            backend_kind="local",
            signals=SignalValues(queue_depth=fields["queue"], kv_cache_utilization=fields["kv"]),
            geography=GEOGRAPHIES[fields["site"]],
            healthy=fields["healthy"],
            fresh=fields["fresh"],
            observed_at=observed,
            kind=fields["kind"],
        )
        for model in fields["models"]
    )


group = st.fixed_dictionaries(
    {
        "site": st.sampled_from(sorted(GEOGRAPHIES)),
        "cluster": st.sampled_from(["c0", "c1", "c2"]),
        "queue": st.sampled_from([None, 0.0, 0.3, 0.95]),
        "kv": st.sampled_from([None, 0.2, 0.97]),
        "healthy": st.sampled_from([True, True, False]),
        "fresh": st.booleans(),
        "age": st.sampled_from([None, 0, 30]),
        "kind": st.sampled_from(["inference_model", "mcp_tool"]),
        "models": st.lists(st.sampled_from(["a", "b", "c"]), min_size=0, max_size=3, unique=True),
    }
).map(_group)
change = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 40), group),
    st.tuples(st.just("remove"), st.integers(0, 40)),
    st.tuples(st.just("replace"), st.integers(0, 40), group),
    st.tuples(st.just("copy"), st.integers(0, 40)),
    st.tuples(st.just("move"), st.integers(0, 40), st.integers(0, 40)),
    st.just(("same",)),
)


def _apply(groups: list[tuple[CandidateInput, ...]], step: tuple[Any, ...]) -> None:
    at = step[1] % len(groups) if len(step) > 1 and groups else 0
    match step[0]:
        case "add":
            groups.insert(at, step[2])
        case "remove" if groups:
            del groups[at]
        case "replace" if groups:
            groups[at] = step[2]
        case "copy" if groups:
            groups[at] = tuple(list(groups[at]))  # equal, but another object
        case "move" if groups:
            groups.insert(step[2] % len(groups), groups.pop(at))


def _context(enabled: bool) -> ScoringContext:
    config = ScoringConfig(admission=AdmissionThresholds(), enabled=enabled)
    return ScoringContext("s0", GEOGRAPHIES["s0"], config)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(group, min_size=0, max_size=30),
    st.lists(change, min_size=1, max_size=20),
    st.sampled_from(list(RoutingPolicy)),
    st.booleans(),
    st.sampled_from([None, 3, 1024]),
)
def test_a_kept_order_is_the_order_sorted_afresh_every_round(
    first: list[tuple[CandidateInput, ...]],
    steps: list[tuple[Any, ...]],
    policy: RoutingPolicy,
    enabled: bool,
    top: int | None,
) -> None:
    groups = list(first)
    cache, context = RenderCache(), _context(enabled)
    for step in [("same",), *steps]:
        _apply(groups, step)
        kept = cache.ordered(groups, context, policy)
        scratch = order_candidates(groups, context, policy)
        assert kept.top(top) == scratch.top(top), step
        assert kept.ranking == scratch.ranking, step
        assert len(kept) == len(scratch)
        assert cache.scores_kept == len({id(g[0]) for g in groups if g})


def test_one_changed_group_moves_only_its_candidates_and_keeps_the_other_records() -> None:
    fields: dict[str, Any] = {
        "site": "s1",
        "cluster": "c0",
        "queue": 0.3,
        "kv": 0.2,
        "healthy": True,
        "fresh": True,
        "age": 0,
        "kind": "inference_model",
        "models": ["a", "b"],
    }
    groups = [_group({**fields, "cluster": f"c{i}", "queue": i / 100}) for i in range(40)]
    cache, context = RenderCache(), _context(True)
    first = cache.ordered(groups, context, RoutingPolicy.GEOGRAPHY_FIRST).top()
    assert cache.order.moved == -1
    groups[5] = _group({**fields, "cluster": "c5", "queue": 0.9})
    second = cache.ordered(groups, context, RoutingPolicy.GEOGRAPHY_FIRST).top()
    assert cache.order.moved == 4  # its two candidates out, two in
    assert second == order_candidates(groups, context).top()
    kept = {id(r) for r in first}
    # Every candidate ranked above the old place of the moved one keeps its record.
    assert all(id(r) in kept for r in second[:10])
