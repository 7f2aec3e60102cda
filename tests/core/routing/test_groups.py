"""Selection groups, the §14 overlay fields, their digest and their reader."""

from __future__ import annotations

import copy
import hashlib
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.core.routing.test_render import build, do_render, network, world

from grid.core.overlay import canonical_digest, verify
from grid.core.overlay.consumer import render_consumer_config
from grid.core.overlay.digest import dumps
from grid.core.overlay.structure import check_overlay_structure
from grid.core.resources.network_spec import ConsumerSpec
from grid.core.routing.candidate import CandidateInput, Geography, SignalValues
from grid.core.routing.explain import explain
from grid.core.routing.groups import assign_groups, group_key
from grid.core.routing.ranking import order_candidates
from grid.core.routing.scoring import ScoringContext
from grid.core.vocabulary import TIER_ORDER, BackendKind, RoutingPolicy, SelectionTier

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
GEOS = {
    "east": Geography("us-east", "a"),
    "east2": Geography("us-east", "a"),
    "central": Geography("us-east", "b"),
    "west": Geography("us-west", "c"),
}


def candidate(site: str, name: str, queue: float | None, fresh: bool, model: str) -> Any:
    return CandidateInput(
        name=model,
        site=site,
        cluster=name,
        provider=name,
        backend_kind=BackendKind.LOCAL if site == "east" else BackendKind.REMOTE,
        signals=SignalValues(queue_depth=queue),
        geography=GEOS[site],
        fresh=fresh,
        observed_at=T0 - timedelta(seconds=len(name)),
    )


def grouped(candidates: list[Any], policy: RoutingPolicy) -> list[tuple[Any, int]]:
    context = ScoringContext("east", GEOS["east"])
    kept = order_candidates([(c,) for c in candidates], context, policy).top()
    return list(zip(kept, assign_groups(kept, policy), strict=True))


def test_geography_first_groups_by_tier_and_score_never_splits() -> None:
    cands = [
        candidate("east", "a", 0.1, True, "m"),
        candidate("east", "b", 0.6, True, "m"),
        candidate("central", "c", 0.0, True, "m"),
        candidate("west", "d", 0.0, True, "m"),
    ]
    out = grouped(cands, RoutingPolicy.GEOGRAPHY_FIRST)
    assert [(r.evaluation.candidate.cluster, g) for r, g in out] == [
        ("a", 0),
        ("b", 0),
        ("c", 1),
        ("d", 2),
    ]


def test_score_first_puts_every_site_in_one_group_and_freshness_first() -> None:
    cands = [
        candidate("east", "a", 0.1, True, "m"),
        candidate("central", "c", 0.0, True, "m"),
        candidate("west", "d", 0.0, False, "m"),
        candidate("west", "e", 0.0, True, "m"),
    ]
    out = grouped(cands, RoutingPolicy.SCORE_FIRST)
    names = [(r.evaluation.candidate.cluster, g) for r, g in out]
    assert names[:3] == [("a", 0), ("c", 0), ("e", 0)]
    assert names[3] == ("d", 1)


def test_groups_are_numbered_per_model() -> None:
    cands = [
        candidate("east", "a", 0.1, True, "m1"),
        candidate("west", "b", 0.1, True, "m1"),
        candidate("west", "c", 0.1, True, "m2"),
    ]
    out = {
        (r.evaluation.candidate.name, r.evaluation.candidate.cluster): g
        for r, g in grouped(cands, RoutingPolicy.GEOGRAPHY_FIRST)
    }
    assert out == {("m1", "a"): 0, ("m1", "b"): 1, ("m2", "c"): 0}


_cand = st.builds(
    lambda site, i, q, fresh, model: candidate(site, f"p{i}", q, fresh, model),
    st.sampled_from(sorted(GEOS)),
    st.integers(0, 30),
    st.one_of(st.none(), st.sampled_from([0.0, 0.2, 0.5, 0.9])),
    st.booleans(),
    st.sampled_from(["m1", "m2"]),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_cand, max_size=14, unique_by=lambda c: (c.name, c.site, c.cluster)),
    st.sampled_from(list(RoutingPolicy)),
    st.randoms(use_true_random=False),
)
def test_groups_are_contiguous_keyed_and_permutation_invariant(
    cands: list[Any], policy: RoutingPolicy, rng: random.Random
) -> None:
    out = grouped(cands, policy)
    shuffled = list(cands)
    rng.shuffle(shuffled)
    again = grouped(shuffled, policy)
    ident = [
        (
            (
                r.evaluation.candidate.name,
                r.evaluation.candidate.site,
                r.evaluation.candidate.cluster,
            ),
            g,
        )
        for r, g in out
    ]
    ident2 = [
        (
            (
                r.evaluation.candidate.name,
                r.evaluation.candidate.site,
                r.evaluation.candidate.cluster,
            ),
            g,
        )
        for r, g in again
    ]
    assert ident == ident2
    last: dict[str, tuple[Any, int]] = {}
    for r, g in out:
        model, key = r.evaluation.candidate.name, group_key(r.evaluation, policy)
        if model not in last:
            assert g == 0
        else:
            prev_key, prev_g = last[model]
            assert g == (prev_g if key == prev_key else prev_g + 1)
        last[model] = (key, g)
    if policy is RoutingPolicy.SCORE_FIRST:
        # The sort keeps equal group keys together: a later group never repeats a key.
        seen: dict[str, list[Any]] = {}
        for r, _g in out:
            keys = seen.setdefault(r.evaluation.candidate.name, [])
            key = group_key(r.evaluation, policy)
            if keys and keys[-1] != key:
                assert key not in keys
            keys.append(key)


def _render(mode: str | None = None, routing: str | None = None, weight: int | None = None) -> Any:
    w = world()
    spec: dict[str, Any] = {}
    if mode:
        spec["selectionPolicy"] = {"mode": mode}
    if routing:
        spec["routingPolicy"] = routing
    w["networks"] = [network(**spec)]
    if weight is not None:
        w["providers"][0]["spec"]["capacityWeight"] = weight
    return do_render(w)


def test_least_loaded_is_the_default_and_writes_random_load_aware() -> None:
    overlay = _render().overlay
    assert overlay["selection_policy"] == "random" and overlay["selection_load_aware"] is True
    assert all(c["capacity_weight"] == 1 for c in overlay["candidates"])
    assert all("traffic_weight" not in c for c in overlay["candidates"])
    groups = {(c["name"], c["cluster"]): c["selection_group"] for c in overlay["candidates"]}
    assert groups[("llama", "vllm-east")] == 0


def test_modes_map_to_upstream_wire_values() -> None:
    for mode, wire in [
        ("deterministic", "deterministic"),
        ("roundRobin", "round_robin"),
        ("random", "random"),
    ]:
        overlay = _render(mode).overlay
        assert overlay["selection_policy"] == wire and "selection_load_aware" not in overlay
        assert all(
            "capacity_weight" not in c and "traffic_weight" not in c for c in overlay["candidates"]
        )
    overlay = _render("weightedRandom", weight=7).overlay
    assert overlay["selection_policy"] == "weighted_random"
    weights = {c["cluster"]: c["traffic_weight"] for c in overlay["candidates"]}
    assert weights["vllm-east"] == 7 and weights["vllm-west"] == 1


def test_fast_digest_equals_the_reference_and_covers_the_policy() -> None:
    for mode in (None, "deterministic", "weightedRandom"):
        rendered = _render(mode, weight=3)
        overlay = rendered.overlay
        value = rendered.envelope["content_digest"]["value"]
        assert value == canonical_digest(overlay)
        content = {k: v for k, v in overlay.items() if k != "generated_at"}
        assert value == hashlib.sha256(dumps(content)).hexdigest()
        assert verify(rendered.envelope).verdict == "accept"
    one, two = _render("deterministic"), _render("random")
    assert one.envelope["revision"] != two.envelope["revision"]


def test_an_overlay_without_selection_keeps_its_digest() -> None:
    overlay = _render().overlay
    bare = copy.deepcopy(overlay)
    for key in ("selection_policy", "selection_load_aware"):
        bare.pop(key)
    for c in bare["candidates"]:
        c.pop("selection_group")
        c.pop("capacity_weight")
    content = {k: bare[k] for k in ("candidates", "local_site", "network")}
    assert canonical_digest(bare) == hashlib.sha256(dumps(content)).hexdigest()


def test_score_first_applies_from_an_upstream_manifest() -> None:
    overlay = _render(routing="scoreFirst").overlay
    llama = [c for c in overlay["candidates"] if c["name"] == "llama"]
    fresh_new = [c for c in llama if c["admission_state"] == "new_and_existing" and c["fresh"]]
    assert {c["selection_group"] for c in fresh_new} == {0}
    assert len({c["selection_tier"] for c in fresh_new}) > 1


def test_explain_names_each_group_and_its_boundary() -> None:
    inputs, signals = build(world())
    result = explain(inputs, site="east", model="llama", signals=signals)
    ranked = [r for r in result.rows if r.rank is not None]
    assert ranked[0].selection_group == 0 and ranked[0].group_reason.startswith("group 0")
    opener = next(r for r in ranked if r.selection_group == 1)
    assert "tier" in opener.group_reason and "differs from group 0's" in opener.group_reason
    assert result.as_dict()["candidates"][0]["selection_group"] == 0


def test_consumer_config_carries_the_selection_fields() -> None:
    rendered = _render("weightedRandom", weight=5)
    clusters = {c["cluster"] for c in rendered.overlay["candidates"]}
    spec = ConsumerSpec.model_validate(
        {
            "enabled": True,
            "clusterEndpoints": [
                {"cluster": c, "address": "127.0.0.1:1", "transport": {"mode": "plaintext"}}
                for c in sorted(clusters)
            ],
        }
    )
    out = render_consumer_config(rendered.overlay, rendered.scope, spec)
    route = next(
        f
        for f in out.document["filter_chains"][0]["filters"]
        if f["filter"] == "intelligent_route"  # type: ignore[union-attr]
    )
    assert route["selection_policy"] == "weighted_random" and "selection_load_aware" not in route
    first = route["candidates"][0]
    assert "selection_group" in first and "traffic_weight" in first and "rank" not in first
    least = _render()
    out = render_consumer_config(least.overlay, least.scope, spec)
    route = next(
        f
        for f in out.document["filter_chains"][0]["filters"]
        if f["filter"] == "intelligent_route"  # type: ignore[union-attr]
    )
    assert route["selection_load_aware"] is True
    assert all("capacity_weight" in c for c in route["candidates"])


def _bare(**candidate_fields: Any) -> dict[str, Any]:
    cand = {"kind": "inference_model", "name": "m", "site": "s", "cluster": "c"}
    return {"network": "n", "local_site": "s", "candidates": [cand | candidate_fields]}


def test_reader_type_checks_the_selection_fields() -> None:
    assert check_overlay_structure(_bare(selection_group=0, traffic_weight=1000)) is None
    assert check_overlay_structure(_bare(capacity_weight=1)) is None
    for bad in (
        {"selection_group": -1},
        {"selection_group": True},
        {"traffic_weight": 0},
        {"capacity_weight": 1001},
        {"traffic_weight": 2.0},
    ):
        assert check_overlay_structure(_bare(**bad)) is not None, bad
    good = _bare() | {"selection_policy": "round_robin", "selection_load_aware": False}
    assert check_overlay_structure(good) is None
    assert check_overlay_structure(_bare() | {"selection_policy": "leastLoaded"}) is not None
    assert check_overlay_structure(_bare() | {"selection_load_aware": "true"}) is not None


def test_reader_accepts_every_value_upstream_writes() -> None:
    assert check_overlay_structure(_bare(selection_tier="unknown")) is None
    assert check_overlay_structure(_bare(admission_state="none")) is None
    assert check_overlay_structure(_bare(admission_state="excluded")) is not None
    assert TIER_ORDER[SelectionTier.UNKNOWN] > TIER_ORDER[SelectionTier.CROSS_REGION]


def _groups_by_wire_key(ranked: list[Any], policy: RoutingPolicy) -> tuple[int, ...]:
    """The §14 numbering spelled out with `group_key`, the wire names themselves."""
    last: dict[tuple[str, str], tuple[tuple[str, ...], int]] = {}
    groups = []
    for item in ranked:
        model = (item.evaluation.candidate.kind, item.evaluation.candidate.name)
        key = group_key(item.evaluation, policy)
        previous = last.get(model)
        group = 0 if previous is None else previous[1] + (previous[0] != key)
        last[model] = (key, group)
        groups.append(group)
    return tuple(groups)


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(sorted(GEOS)),
            st.sampled_from([None, 0.0, 0.5, 0.95]),
            st.booleans(),
            st.sampled_from(["llama", "qwen"]),
        ),
        max_size=25,
    ),
    st.sampled_from(list(RoutingPolicy)),
)
def test_groups_follow_the_wire_names_of_the_group_key(
    drawn: list[tuple[str, float | None, bool, str]], policy: RoutingPolicy
) -> None:
    candidates = [
        candidate(site, f"p{i}", queue, fresh, model)
        for i, (site, queue, fresh, model) in enumerate(drawn)
    ]
    context = ScoringContext("east", GEOS["east"])
    kept = list(order_candidates([(c,) for c in candidates], context, policy).top())
    assert assign_groups(kept, policy) == _groups_by_wire_key(kept, policy)
