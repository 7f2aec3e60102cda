"""Re-ranking an unscored overlay by pulled signals: only within (admission, tier, fresh)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from grid.core.routing.candidate import Geography
from grid.core.routing.rerank import RerankContext, group_key, rerank, score_of
from grid.core.routing.scoring import ScoringConfig, ScoringWeights
from grid.core.routing.signals import SignalsDocument, parse_signals

GENERATED = "2026-01-01T00:01:00Z"


@dataclass(frozen=True)
class Cand:
    kind: str
    name: str
    site: str
    cluster: str
    fresh: bool = True
    admission: str = "new_and_existing"
    tier: str | None = "same_site"


def _doc(*entries: dict[str, Any]) -> SignalsDocument:
    return parse_signals(
        {
            "schema_version": "1.0.0",
            "network": "n",
            "site": "east",
            "epoch": 1,
            "sequence": 1,
            "generated_at": GENERATED,
            "providers": list(entries),
        }
    )


def _entry(site: str, cluster: str, models: list[str] | None = None, **signals: float) -> dict:
    return {
        "name": f"p-{cluster}",
        "cluster": cluster,
        "site": site,
        "backend_kind": "local",
        "models": models if models is not None else ["m"],
        "observed_at": "2026-01-01T00:00:59Z",
        "signals": signals,
    }


CTX = RerankContext("east", {"east": Geography("r1", "a"), "west": Geography("r1", "b")})


def test_a_busier_cluster_moves_below_an_idle_one_in_the_same_group() -> None:
    busy, idle = (
        Cand("inference_model", "m", "east", "busy"),
        Cand("inference_model", "m", "east", "idle"),
    )
    doc = _doc(_entry("east", "busy", queue_depth=0.8), _entry("east", "idle", queue_depth=0.1))
    assert rerank([busy, idle], doc, CTX) == [idle, busy]


def test_a_better_score_never_crosses_a_tier_admission_or_freshness_boundary() -> None:
    near = Cand("inference_model", "m", "east", "near")
    far = Cand("inference_model", "m", "west", "far", tier="same_region")
    stale = Cand("inference_model", "m", "east", "stale", fresh=False)
    limited = Cand("inference_model", "m", "east", "lim", admission="existing_only")
    doc = _doc(
        _entry("east", "near", queue_depth=0.9, kv_cache_utilization=0.8),
        _entry("west", "far", queue_depth=0.0),
        _entry("east", "stale", queue_depth=0.0),
        _entry("east", "lim", queue_depth=0.0),
    )
    listed = [near, stale, far, limited]
    assert rerank(listed, doc, CTX) == listed


def test_a_candidate_without_an_entry_scores_neutral_and_ties_keep_overlay_order() -> None:
    a, b = Cand("inference_model", "m", "east", "a"), Cand("inference_model", "m", "east", "b")
    assert score_of(a, None, CTX) == 0.5
    assert rerank([a, b], _doc(), CTX) == [a, b]
    assert rerank([b, a], _doc(), CTX) == [b, a]


def test_an_entry_matches_by_site_cluster_and_model() -> None:
    a, b = Cand("inference_model", "m", "east", "a"), Cand("inference_model", "m", "east", "b")
    # The entry for cluster "a" lists another model only: a stays neutral, b scores high.
    doc = _doc(
        _entry("east", "a", ["other"], queue_depth=0.0), _entry("east", "b", [], queue_depth=0.0)
    )
    assert rerank([a, b], doc, CTX) == [b, a]


def test_weights_decide_between_a_cheap_and_a_fast_cluster() -> None:
    cheap, fast = (
        Cand("inference_model", "m", "east", "cheap"),
        Cand("inference_model", "m", "east", "fast"),
    )
    doc = _doc(
        _entry("east", "cheap", p99_latency_ms=4000.0, cost_per_million_input_tokens=1.0),
        _entry("east", "fast", p99_latency_ms=100.0, cost_per_million_input_tokens=90.0),
    )
    by_cost = RerankContext(
        "east", CTX.geographies, ScoringConfig(ScoringWeights(0, 0, 0, 0, 0, 1))
    )
    by_latency = RerankContext(
        "east", CTX.geographies, ScoringConfig(ScoringWeights(0, 0, 0, 0, 1, 0))
    )
    assert rerank([fast, cheap], doc, by_cost) == [cheap, fast]
    assert rerank([cheap, fast], doc, by_latency) == [fast, cheap]


def test_inline_candidates_without_a_tier_get_it_from_geography() -> None:
    ctx = RerankContext("east", {"east": Geography("r1", "a"), "west": Geography("r1", "a")})
    assert group_key(Cand("inference_model", "m", "east", "c", tier=None), ctx)[1] == "same_site"
    assert group_key(Cand("inference_model", "m", "west", "c", tier=None), ctx)[1] == "same_zone"
    assert (
        group_key(Cand("inference_model", "m", "south", "c", tier=None), ctx)[1] == "cross_region"
    )


_cands = st.lists(
    st.builds(
        Cand,
        kind=st.just("inference_model"),
        name=st.sampled_from(["m", "n"]),
        site=st.sampled_from(["east", "west"]),
        cluster=st.text("abcdef", min_size=1, max_size=3),
        fresh=st.booleans(),
        admission=st.sampled_from(["new_and_existing", "existing_only"]),
        tier=st.sampled_from(["same_site", "same_region", None]),
    ),
    max_size=12,
    unique_by=lambda c: (c.name, c.site, c.cluster),
)
_ratio = st.floats(0, 1)


@given(_cands, st.data())
def test_rerank_laws(candidates: list[Cand], data: st.DataObject) -> None:
    entries = {}
    for c in candidates:
        if (c.site, c.cluster) not in entries and data.draw(st.booleans()):
            entries[(c.site, c.cluster)] = _entry(
                c.site,
                c.cluster,
                [],
                queue_depth=data.draw(_ratio),
                kv_cache_utilization=data.draw(_ratio),
            )
    doc = _doc(*entries.values())
    out = rerank(candidates, doc, CTX)
    # A permutation that keeps every position's group.
    assert sorted(map(id, out)) == sorted(map(id, candidates))
    assert [group_key(c, CTX) for c in out] == [group_key(c, CTX) for c in candidates]
    index = doc.index()
    by_route = {(e.site, e.cluster): e for e in index.values()}

    def score(c: Cand) -> float:
        return score_of(c, by_route.get((c.site, c.cluster)), CTX)

    for key in {group_key(c, CTX) for c in out}:
        members = [c for c in out if group_key(c, CTX) == key]
        scores = [score(c) for c in members]
        assert scores == sorted(scores, reverse=True)
        # Equal scores keep overlay order.
        original = [c for c in candidates if group_key(c, CTX) == key]
        for i in range(len(members) - 1):
            if scores[i] == scores[i + 1]:
                assert original.index(members[i]) < original.index(members[i + 1])
