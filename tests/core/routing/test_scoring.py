"""Table tests of the scoring engine, each expectation computed by hand.

Default weights are locality 3, queue 3, kv 2, prefix 2, latency 2, cost 1, so
Σw = 13 in every case below unless a case says otherwise.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from grid.core.routing import scoring
from grid.core.routing.candidate import (
    CandidateInput,
    CredentialRef,
    ExclusionReason,
    Geography,
    SignalValues,
    provider_candidates,
    with_cost,
)
from grid.core.routing.ranking import (
    order_candidates,
    rank,
    score_candidates,
    sort_key,
)
from grid.core.routing.scoring import (
    AdmissionThresholds,
    Evaluation,
    ScoringConfig,
    ScoringContext,
    ScoringWeights,
    evaluate,
)
from grid.core.vocabulary import AdmissionState, BackendKind, SelectionTier

EAST = Geography(region="us-east", zone="us-east-1a")
EAST_B = Geography(region="us-east", zone="us-east-1b")
WEST = Geography(region="us-west", zone="us-west-2a")
CTX = ScoringContext(local_site="east", local_geography=EAST)
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def cand(
    name: str = "m",
    site: str = "east",
    cluster: str = "c",
    kind: BackendKind = BackendKind.LOCAL,
    geography: Geography | None = EAST,
    **signals: float,
) -> CandidateInput:
    """A candidate with the given raw signals."""
    return CandidateInput(
        name=name,
        site=site,
        cluster=cluster,
        provider=cluster,
        backend_kind=kind,
        geography=geography,
        signals=SignalValues(**signals),
    )


# (id, candidate, context, expected per-signal scores, expected score)
SCORE_CASES = [
    (
        # locality 1.0 (self-hosted at own site), five missing signals at 0.5:
        # (3*1 + 3*.5 + 2*.5 + 2*.5 + 2*.5 + 1*.5) / 13 = (3+1.5+1+1+1+.5)/13 = 8/13
        "all_missing_is_neutral_not_zero",
        cand(),
        CTX,
        (1.0, 0.5, 0.5, 0.5, 0.5, 0.5),
        8 / 13,
    ),
    (
        # queue .2 -> .8, kv .5 -> .5, prefix .6, latency 1000/5000 -> .8, cost 10/100 -> .9:
        # (3*1 + 3*.8 + 2*.5 + 2*.6 + 2*.8 + 1*.9)/13 = (3+2.4+1+1.2+1.6+.9)/13 = 10.1/13
        "all_present",
        cand(
            queue_depth=0.2,
            kv_cache_utilization=0.5,
            prefix_cache_hit_ratio=0.6,
            p99_latency_ms=1000,
            cost_per_million_input_tokens=10,
        ),
        CTX,
        (1.0, 0.8, 0.5, 0.6, 0.8, 0.9),
        10.1 / 13,
    ),
    (
        # remote at another site in the same region: locality .7
        # (3*.7 + 3*.5 + 2*.5*3 + 1*.5)/13 = (2.1+1.5+3+.5)/13 = 7.1/13
        "remote_same_region",
        cand(site="central", kind=BackendKind.REMOTE, geography=EAST_B),
        CTX,
        (0.7, 0.5, 0.5, 0.5, 0.5, 0.5),
        7.1 / 13,
    ),
    (
        # remote cross-region: locality .4 -> (1.2+1.5+3+.5)/13 = 6.2/13
        "remote_cross_region",
        cand(site="west", kind=BackendKind.REMOTE, geography=WEST),
        CTX,
        (0.4, 0.5, 0.5, 0.5, 0.5, 0.5),
        6.2 / 13,
    ),
    (
        # remote at a site whose region is unknown: locality missing -> .5, all .5 -> 6.5/13
        "remote_unknown_region_is_missing",
        cand(site="nowhere", kind=BackendKind.REMOTE, geography=None),
        CTX,
        (0.5, 0.5, 0.5, 0.5, 0.5, 0.5),
        6.5 / 13,
    ),
    (
        # a `local` backend declared at another site is judged by site like any
        # self-hosted capacity: gateway region unknown -> locality missing -> 6.5/13
        "gateway_region_unknown_is_missing",
        cand(site="west", geography=WEST),
        ScoringContext(local_site="east", local_geography=None),
        (0.5, 0.5, 0.5, 0.5, 0.5, 0.5),
        6.5 / 13,
    ),
    (
        # cloud_managed at the gateway's own site still scores .2:
        # (3*.2 + 3*.5 + 3 + .5)/13 = (.6+1.5+3+.5)/13 = 5.6/13
        "cloud_managed_anywhere",
        cand(kind=BackendKind.CLOUD_MANAGED),
        CTX,
        (0.2, 0.5, 0.5, 0.5, 0.5, 0.5),
        5.6 / 13,
    ),
    (
        # api_provider .1 with cost 25/100 -> .75:
        # (3*.1 + 3*.5 + 2*.5*3 + 1*.75)/13 = (.3+1.5+3+.75)/13 = 5.55/13
        "api_provider_with_cost",
        cand(kind=BackendKind.API_PROVIDER, geography=None, cost_per_million_input_tokens=25),
        CTX,
        (0.1, 0.5, 0.5, 0.5, 0.5, 0.75),
        5.55 / 13,
    ),
    (
        # latency 9000 > 5000 ceiling -> 0, cost 250 > 100 -> 0, queue 1.0 -> 0 (but that
        # is 'excluded' admission; scores are still computed): (3 + 0 + 1 + 1 + 0 + 0)/13 = 5/13
        "over_ceiling_scores_zero",
        cand(queue_depth=1.0, p99_latency_ms=9000, cost_per_million_input_tokens=250),
        CTX,
        (1.0, 0.0, 0.5, 0.5, 0.0, 0.0),
        5 / 13,
    ),
    (
        # custom ceilings: latency 250/1000 -> .75; cost 5/20 -> .75
        # (3*1 + 3*.5 + 2*.5 + 2*.5 + 2*.75 + 1*.75)/13 = (3+1.5+1+1+1.5+.75)/13 = 8.75/13
        "custom_ceilings",
        cand(p99_latency_ms=250, cost_per_million_input_tokens=5),
        replace(
            CTX,
            config=ScoringConfig(latency_ceiling_ms=1000, cost_ceiling_per_million_input_tokens=20),
        ),
        (1.0, 0.5, 0.5, 0.5, 0.75, 0.75),
        8.75 / 13,
    ),
    (
        # custom weights locality 1, queue 1, others 0: Σw = 2;
        # queue .4 -> .6: (1*1 + 1*.6)/2 = .8
        "custom_weights",
        cand(queue_depth=0.4, prefix_cache_hit_ratio=0.9),
        replace(
            CTX,
            config=ScoringConfig(
                weights=ScoringWeights(
                    locality=1, queue_depth=1, kv_cache=0, prefix_cache=0, latency=0, cost=0
                )
            ),
        ),
        (1.0, 0.6, 0.5, 0.9, 0.5, 0.5),
        0.8,
    ),
]


@pytest.mark.parametrize(
    ("candidate", "context", "signal_scores", "score"),
    [case[1:] for case in SCORE_CASES],
    ids=[case[0] for case in SCORE_CASES],
)
def test_signal_scores_and_blend_match_hand_computation(
    candidate: CandidateInput,
    context: ScoringContext,
    signal_scores: tuple[float, ...],
    score: float,
) -> None:
    evaluation = evaluate(candidate, context)
    assert evaluation.signal_scores.as_tuple() == pytest.approx(signal_scores)
    assert evaluation.score == pytest.approx(score)
    assert evaluation.breakdown is not None
    weights = context.config.weights.as_tuple()
    expected_parts = [w * s / sum(weights) for w, s in zip(weights, signal_scores, strict=True)]
    breakdown = evaluation.breakdown.as_dict()
    assert [breakdown[k] for k in list(breakdown)[:6]] == pytest.approx(expected_parts)
    assert breakdown["total"] == evaluation.score
    assert sum(expected_parts) == pytest.approx(breakdown["total"])


def test_breakdown_of_all_present_case_is_each_weighted_share() -> None:
    # From "all_present": 3*1/13, 3*.8/13, 2*.5/13, 2*.6/13, 2*.8/13, 1*.9/13.
    evaluation = evaluate(SCORE_CASES[1][1], CTX)  # type: ignore[arg-type]
    assert evaluation.breakdown is not None
    assert evaluation.breakdown.as_dict() == pytest.approx(
        {
            "locality": 3 / 13,
            "queue_depth": 2.4 / 13,
            "kv_cache": 1 / 13,
            "prefix_cache": 1.2 / 13,
            "latency": 1.6 / 13,
            "cost": 0.9 / 13,
            "total": 10.1 / 13,
        }
    )
    assert evaluation.signal_scores.missing == frozenset()


def test_missing_signals_are_reported_by_name() -> None:
    evaluation = evaluate(cand(queue_depth=0.1), CTX)
    assert evaluation.signal_scores.missing == {
        "kv_cache",
        "prefix_cache",
        "latency",
        "cost",
    }


@pytest.mark.parametrize(
    ("signals", "expected"),
    [
        ({}, AdmissionState.NEW_AND_EXISTING),  # missing triggers nothing
        ({"queue_depth": 0.8499}, AdmissionState.NEW_AND_EXISTING),  # just below .85
        ({"queue_depth": 0.85}, AdmissionState.EXISTING_ONLY),  # AT the threshold triggers
        ({"kv_cache_utilization": 0.8999}, AdmissionState.NEW_AND_EXISTING),
        ({"kv_cache_utilization": 0.90}, AdmissionState.EXISTING_ONLY),
        ({"queue_depth": 0.97, "kv_cache_utilization": 0.1}, AdmissionState.EXISTING_ONLY),
        ({"queue_depth": 0.98}, AdmissionState.EXCLUDED),
        ({"kv_cache_utilization": 0.98}, AdmissionState.EXCLUDED),
        ({"queue_depth": 0.1, "kv_cache_utilization": 0.99}, AdmissionState.EXCLUDED),
    ],
)
def test_admission_thresholds_trigger_at_or_above(
    signals: dict[str, float], expected: AdmissionState
) -> None:
    assert evaluate(cand(**signals), CTX).admission is expected


def test_custom_admission_thresholds_are_honoured() -> None:
    # existingOnly queue .5: a queue of .5 is existing_only; excluded kv .6: kv .6 excluded.
    config = ScoringConfig(
        admission=AdmissionThresholds(existing_only_queue_depth=0.5, excluded_kv_cache=0.6)
    )
    context = replace(CTX, config=config)
    assert evaluate(cand(queue_depth=0.5), context).admission is AdmissionState.EXISTING_ONLY
    assert evaluate(cand(kv_cache_utilization=0.6), context).admission is AdmissionState.EXCLUDED


@pytest.mark.parametrize(
    ("site", "geography", "expected"),
    [
        ("east", None, SelectionTier.SAME_SITE),  # same site even with unknown geography
        ("east-2", EAST, SelectionTier.SAME_ZONE),  # same region and zone
        ("central", EAST_B, SelectionTier.SAME_REGION),  # same region, other zone
        ("central", Geography("us-east", None), SelectionTier.SAME_REGION),  # zone unknown
        ("west", WEST, SelectionTier.CROSS_REGION),
        ("nowhere", None, SelectionTier.CROSS_REGION),  # unknown geography
        ("nowhere", Geography(None, "us-east-1a"), SelectionTier.CROSS_REGION),
    ],
)
def test_selection_tier(site: str, geography: Geography | None, expected: SelectionTier) -> None:
    assert evaluate(cand(site=site, geography=geography), CTX).tier is expected


def test_unhealthy_is_excluded_entirely_even_when_it_would_rank_first() -> None:
    sick = replace(cand(cluster="sick"), healthy=False)
    well = cand(site="west", cluster="well", kind=BackendKind.REMOTE, geography=WEST)
    ranking = score_candidates([sick, well], CTX)
    assert [r.evaluation.candidate.cluster for r in ranking.ranked] == ["well"]
    assert [(x.evaluation.candidate.cluster, x.reason) for x in ranking.excluded] == [
        ("sick", ExclusionReason.UNHEALTHY)
    ]


def test_admission_excluded_is_removed() -> None:
    ranking = score_candidates([cand(queue_depth=0.99), cand(cluster="d")], CTX)
    assert [r.evaluation.candidate.cluster for r in ranking.ranked] == ["d"]
    assert ranking.excluded[0].reason is ExclusionReason.ADMISSION_EXCLUDED


def order(candidates: list[CandidateInput], context: ScoringContext = CTX) -> list[str]:
    """Clusters in ranked order, after checking ranks are 0..n-1."""
    ranking = score_candidates(candidates, context)
    assert [r.rank for r in ranking.ranked] == list(range(len(ranking.ranked)))
    return [r.evaluation.candidate.cluster for r in ranking.ranked]


def test_admission_sorts_before_tier_and_score() -> None:
    # "busy" is same_site, score (3 + 3*.1 + 1 + 1 + 1 + .5)/13 = 6.8/13, but
    # existing_only (queue .9 >= .85); "far" is cross_region, locality .4, score
    # 6.2/13 and new_and_existing: admission decides first.
    busy = cand(cluster="busy", queue_depth=0.9)
    far = cand(site="west", cluster="far", kind=BackendKind.REMOTE, geography=WEST)
    assert order([busy, far]) == ["far", "busy"]


def test_tier_sorts_before_score() -> None:
    # "near" same_site but a poor score: queue .8 -> .2, latency 5000 -> 0:
    #   (3*1 + 3*.2 + 1 + 1 + 0 + .5)/13 = 6.1/13
    # "zone" same_zone, remote same region .7, perfect otherwise:
    #   (2.1 + 3 + 2 + 2 + 2 + 1)/13 = 12.1/13 — higher, but the tier wins.
    near = cand(cluster="near", queue_depth=0.8, p99_latency_ms=5000)
    zone = cand(
        site="east-2",
        cluster="zone",
        kind=BackendKind.REMOTE,
        queue_depth=0,
        kv_cache_utilization=0,
        prefix_cache_hit_ratio=1,
        p99_latency_ms=0,
        cost_per_million_input_tokens=0,
    )
    assert order([zone, near]) == ["near", "zone"]


def test_score_sorts_descending_within_a_tier() -> None:
    # a: queue .5 -> (3+1.5+1+1+1+.5)/13 = 8/13; b: queue .1 -> (3+2.7+1+1+1+.5)/13 = 9.2/13
    a = cand(cluster="a", queue_depth=0.5)
    b = cand(cluster="b", queue_depth=0.1)
    assert order([a, b]) == ["b", "a"]


def test_fresh_sorts_before_newer_sample() -> None:
    # Equal scores (8/13 each). "stale" has the newer sample but fresh=False.
    stale = replace(cand(cluster="a"), fresh=False, observed_at=T0)
    fresh = replace(cand(cluster="b"), fresh=True, observed_at=T0 - timedelta(seconds=30))
    assert order([stale, fresh]) == ["b", "a"]


def test_newer_sample_sorts_first_and_no_sample_is_oldest() -> None:
    # Equal scores and freshness; order by observed_at descending, None last, even
    # though the tie-break ("a" < "b" < "c") would say otherwise.
    none = cand(cluster="a")
    old = replace(cand(cluster="b"), observed_at=T0 - timedelta(seconds=10))
    new = replace(cand(cluster="c"), observed_at=T0)
    assert order([none, old, new]) == ["c", "b", "a"]


def test_tie_break_is_site_then_name_then_cluster() -> None:
    # Identical everything except identity; sites differ but both are same_zone
    # remote peers (.7) so tier and score tie: 7.1/13 each.
    x = cand(name="m", site="zz", cluster="a", kind=BackendKind.REMOTE)
    y = cand(name="m", site="aa", cluster="b", kind=BackendKind.REMOTE)
    assert order([x, y]) == ["b", "a"]  # site "aa" < "zz"
    p = cand(name="beta", cluster="a")
    q = cand(name="alpha", cluster="b")
    assert order([p, q]) == ["b", "a"]  # same site; name "alpha" < "beta"
    r = cand(cluster="y")
    s = cand(cluster="x")
    assert order([r, s]) == ["x", "y"]  # same site and name; cluster "x" < "y"


def test_poll_mode_has_no_score_and_ignores_it_in_the_sort() -> None:
    # With scoring on, "b" (queue .1 -> 9.2/13) beats "a" (queue .7 -> 6.8/13).
    # With scoring off the tie-break decides: "a" < "b".
    a = cand(cluster="a", queue_depth=0.7)
    b = cand(cluster="b", queue_depth=0.1)
    assert order([a, b]) == ["b", "a"]
    poll = replace(CTX, config=ScoringConfig(enabled=False))
    ranking = score_candidates([a, b], poll)
    assert [r.evaluation.candidate.cluster for r in ranking.ranked] == ["a", "b"]
    assert all(r.evaluation.score is None for r in ranking.ranked)
    assert all(r.evaluation.breakdown is None for r in ranking.ranked)


def test_poll_mode_still_orders_by_admission_tier_and_freshness() -> None:
    poll = replace(CTX, config=ScoringConfig(enabled=False))
    busy = cand(cluster="a", queue_depth=0.9)  # existing_only
    far = cand(site="west", cluster="b", kind=BackendKind.REMOTE, geography=WEST)
    stale = replace(cand(cluster="c"), fresh=False)
    fresh = cand(cluster="d")
    # new_and_existing same_site: d (fresh), c (stale); then far (cross_region); then busy.
    assert order([busy, far, stale, fresh], poll) == ["d", "c", "b", "a"]


@pytest.mark.parametrize(
    "weights",
    [
        {"locality": -1.0},
        {
            "locality": 0.0,
            "queue_depth": 0.0,
            "kv_cache": 0.0,
            "prefix_cache": 0.0,
            "latency": 0.0,
            "cost": 0.0,
        },
        {"cost": float("nan")},
    ],
)
def test_invalid_weights_are_refused(weights: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="weights"):
        ScoringWeights(**weights)


def test_non_positive_ceilings_are_refused() -> None:
    with pytest.raises(ValueError, match="latencyCeilingMs"):
        ScoringConfig(latency_ceiling_ms=0)
    with pytest.raises(ValueError, match="costCeiling"):
        ScoringConfig(cost_ceiling_per_million_input_tokens=-1)


def _mixed_groups() -> list[tuple[CandidateInput, ...]]:
    """One group of candidates per provider, sharing signals and geography, as drafts are."""
    shared = SignalValues(queue_depth=0.3, kv_cache_utilization=0.2, p99_latency_ms=900)
    busy = SignalValues(queue_depth=0.9)
    full = SignalValues(kv_cache_utilization=0.99)
    out: list[tuple[CandidateInput, ...]] = []
    for i, (site, geography, kind, signals) in enumerate(
        [
            ("east", EAST, BackendKind.LOCAL, shared),
            ("east-2", EAST, BackendKind.REMOTE, shared),  # same signals object, other site
            ("central", EAST_B, BackendKind.REMOTE, busy),
            ("west", WEST, BackendKind.REMOTE, full),  # admission excluded
            ("west", WEST, BackendKind.CLOUD_MANAGED, SignalValues(queue_depth=0.3)),
            ("nowhere", None, BackendKind.API_PROVIDER, SignalValues()),
            ("east", EAST, BackendKind.LOCAL, SignalValues(queue_depth=0.3)),  # equal values
        ]
    ):
        out.append(
            provider_candidates(
                ["m0", "m1", "m2"],
                site=site,
                cluster=f"c{i}",
                provider=f"p{i}",
                backend_kind=kind,
                signals=signals,
                geography=geography,
                healthy=i != 2,
                fresh=i % 3 != 0,
                observed_at=None if i == 4 else T0 - timedelta(seconds=i * 7 % 5),
                credential=None,
            )
        )
    return out


def _mixed_candidates() -> list[CandidateInput]:
    return [c for group in _mixed_groups() for c in group]


@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize("grouped", [True, False])
def test_ordering_equals_evaluate_then_rank(enabled: bool, grouped: bool) -> None:
    # order_candidates evaluates a group (one provider's models) once and sorts
    # on precomputed keys; the result must be exactly the plain definition.
    context = replace(CTX, config=ScoringConfig(enabled=enabled))
    groups = _mixed_groups()
    candidates = [c for group in groups for c in group]
    evaluations = [evaluate(c, context) for c in candidates]
    kept = [
        e for e in evaluations if e.candidate.healthy and e.admission is not AdmissionState.EXCLUDED
    ]
    if grouped:
        ranking = order_candidates(groups, context).ranking
    else:
        ranking = score_candidates(candidates, context)
    assert ranking.ranked == rank(kept)
    assert [r.evaluation for r in ranking.ranked] == sorted(kept, key=sort_key)
    assert [x.evaluation for x in ranking.excluded] == [e for e in evaluations if e not in kept]
    for r in ranking.ranked:
        assert vars(r.evaluation).keys() == {f.name for f in fields(Evaluation)}
        assert any(c is r.evaluation.candidate for c in candidates)


def test_provider_candidates_equal_one_constructor_call_per_model() -> None:
    shared: dict[str, Any] = {
        "site": "west",
        "cluster": "x",
        "provider": "p",
        "backend_kind": BackendKind.REMOTE,
        "signals": SignalValues(queue_depth=0.2),
        "geography": WEST,
        "healthy": False,
        "fresh": False,
        "observed_at": T0,
        "credential": CredentialRef("api_key", "s", "ns", "k"),
    }
    made = provider_candidates(["m", "n"], **shared)
    expected = tuple(CandidateInput(name=n, **shared) for n in ["m", "n"])
    assert made == expected
    assert [hash(c) for c in made] == [hash(c) for c in expected]
    assert [repr(c) for c in made] == [repr(c) for c in expected]
    assert all(vars(c).keys() == {f.name for f in fields(CandidateInput)} for c in made)
    with pytest.raises(FrozenInstanceError):
        made[1].name = "o"  # type: ignore[misc]
    assert provider_candidates([], **shared) == ()


def test_ordering_builds_the_top_first_and_the_rest_on_demand() -> None:
    groups = _mixed_groups()
    full = order_candidates(groups, CTX).ranking
    ordering = order_candidates(groups, CTX)
    assert len(ordering) == len(full.ranked) > 4
    top = ordering.top(4)
    assert top == full.ranked[:4]
    assert ordering.top(0) == () and ordering.top(-1) == ()
    assert ordering.top(10_000) == full.ranked
    # The full ranking reuses the records already built for the top.
    assert all(a is b for a, b in zip(top, ordering.ranking.ranked, strict=False))
    assert ordering.ranking == full
    assert ordering.ranking is ordering.ranking


def test_with_cost_fills_only_a_missing_cost() -> None:
    observed = SignalValues(queue_depth=0.5, p99_latency_ms=100)
    filled = with_cost(observed, 2.5)
    assert filled == replace(observed, cost_per_million_input_tokens=2.5)
    assert hash(filled) == hash(replace(observed, cost_per_million_input_tokens=2.5))
    assert vars(filled).keys() == {f.name for f in fields(SignalValues)}
    assert with_cost(observed, None) is observed
    priced = SignalValues(cost_per_million_input_tokens=1.0)
    assert with_cost(priced, 2.5) is priced


def test_the_signal_table_follows_the_one_signal_order() -> None:
    # signal_scores fills SignalScores positionally from the table, so the table,
    # SIGNAL_NAMES and the record fields must name the signals in one order.
    assert tuple(name for name, _ in scoring._SIGNAL_RULES) == scoring.SIGNAL_NAMES
    assert tuple(f.name for f in fields(scoring.SignalScores))[:6] == scoring.SIGNAL_NAMES
    assert tuple(f.name for f in fields(scoring.ScoreBreakdown))[:6] == scoring.SIGNAL_NAMES
