"""``explain(as_gateway=True)``: a poll-mode overlay as the gateway re-ranks and scores it.

Every expectation is computed by the gateway's own code: `rerank` over the
candidates of the rendered overlay, `score_of` / `breakdown_of` of each one's
pulled signals entry, with the context `poll_ranking` hands the gateway.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.resources import GridNetwork, GridSite, InferenceProvider, parse_resource
from grid.core.routing.explain import NO_ENTRY_NOTE, Explanation, explain
from grid.core.routing.render import RenderInputs, poll_ranking, render
from grid.core.routing.rerank import (
    RerankContext,
    breakdown_of,
    entry_for,
    rerank,
    score_of,
    signal_entries,
)
from grid.core.routing.signals import SignalsDocument, parse_signals

API = "grid.praxis-proxy.io/v1alpha1"
NOW = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
GENERATED = datetime(2026, 1, 1, 12, tzinfo=UTC)
SITES = {"east": ("r1", "a"), "central": ("r1", "b"), "west": ("r2", "c")}


def _network(mode: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "GridNetwork",
        "metadata": {"name": "grid"},
        "spec": {
            "gatewayRefs": [{"name": "edge", "namespace": "ns", "localSiteName": "east"}],
            "signalTransport": {"mode": mode},
            "scoring": {"weights": {"locality": 1, "queue_depth": 4, "cost": 2}},
        },
    }


def _site(name: str) -> dict[str, Any]:
    region, zone = SITES[name]
    return {
        "apiVersion": API,
        "kind": "GridSite",
        "metadata": {"name": name},
        "spec": {"gridNetworkRef": "grid", "region": region, "zone": zone},
    }


def _provider(name: str, at: str, models: tuple[str, ...] = ("llama",)) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceProvider",
        "metadata": {"name": name, "labels": {"grid.praxis-proxy.io/site": at}},
        "spec": {
            "gridNetworkRef": "grid",
            "backendKind": "local" if at == "east" else "remote",
            "providerKind": "self_hosted",
            "models": [{"name": m} for m in models],
        },
    }


def _entry(name: str, at: str, age_s: float = 5, **signals: float) -> dict[str, Any]:
    return {
        "name": name,
        "cluster": name,
        "site": at,
        "backend_kind": "local" if at == "east" else "remote",
        "models": [],
        "observed_at": (GENERATED - timedelta(seconds=age_s)).isoformat(),
        "signals": signals,
    }


def _world(
    mode: str, providers: list[dict[str, Any]], entries: list[dict[str, Any]]
) -> tuple[RenderInputs, SignalsDocument]:
    resources = [parse_resource(o) for o in [_network(mode), *map(_site, SITES), *providers]]
    inputs = RenderInputs(
        networks=[r for r in resources if isinstance(r, GridNetwork)],
        sites=[r for r in resources if isinstance(r, GridSite)],
        providers=[r for r in resources if isinstance(r, InferenceProvider)],
    )
    signals = parse_signals(
        {
            "schema_version": "1.0.0",
            "network": "grid",
            "site": "east",
            "epoch": 1,
            "sequence": 1,
            "generated_at": GENERATED.isoformat(),
            "providers": entries,
        }
    )
    return inputs, signals


class Cand:
    """An overlay candidate as the gateway reads it (its `Candidate`'s fields)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.kind, self.name, self.site = raw["kind"], raw["name"], raw["site"]
        self.cluster, self.fresh, self.rank = raw["cluster"], raw["fresh"], raw["rank"]
        self.admission, self.tier = raw["admission_state"], raw["selection_tier"]


def _gateway(
    inputs: RenderInputs, signals: SignalsDocument, model: str
) -> tuple[list[Cand], RerankContext]:
    """The model's overlay candidates reranked by the gateway, and its ranking context."""
    rendered = render(inputs, site="east", gateway="edge", now=NOW, signals=signals)
    ctx = poll_ranking(rendered)
    assert ctx is not None
    overlay = [Cand(c) for c in rendered.overlay["candidates"] if c["name"] == model]
    return rerank(overlay, signals, ctx), ctx


def _ranked(result: Explanation) -> list[tuple[str, str]]:
    return [(r.site, r.cluster) for r in result.rows if r.rank is not None]


def _assert_as_the_gateway(inputs: RenderInputs, signals: SignalsDocument, model: str) -> None:
    result = explain(inputs, site="east", model=model, signals=signals, as_gateway=True)
    ordered, ctx = _gateway(inputs, signals, model)
    assert result.scored_by == "gateway"
    assert _ranked(result) == [(c.site, c.cluster) for c in ordered]
    by_route = signal_entries(signals)
    rows = [r for r in result.rows if r.rank is not None]
    for row, cand in zip(rows, ordered, strict=True):
        entry = entry_for(cand, by_route)
        assert row.rank == cand.rank
        assert row.score == score_of(cand, entry, ctx)
        assert row.score_breakdown == breakdown_of(cand, entry, ctx).as_dict()
        assert (NO_ENTRY_NOTE in row.notes) is (entry is None)


def test_scores_that_invert_the_overlay_order_reorder_the_group() -> None:
    providers = [_provider("p-a", "east"), _provider("p-b", "east")]
    entries = [_entry("p-a", "east", queue_depth=0.8), _entry("p-b", "east", queue_depth=0.1)]
    inputs, signals = _world("poll", providers, entries)
    default = explain(inputs, site="east", model="llama", signals=signals)
    assert _ranked(default) == [("east", "p-a"), ("east", "p-b")]  # overlay: tie-break
    assert all(r.score is None and r.score_breakdown is None for r in default.rows)
    result = explain(inputs, site="east", model="llama", signals=signals, as_gateway=True)
    assert _ranked(result) == [("east", "p-b"), ("east", "p-a")]
    assert [r.rank for r in result.rows] == [1, 0]
    first, second = result.rows
    assert first.reason.startswith("first for this model as the poll-mode gateway ranks it")
    assert "the gateway's score" in first.reason
    assert second.reason.startswith("after p-b@east because the gateway's score")
    assert second.signal_values["queue_depth"] == 0.8
    assert second.signal_scores["queue_depth"] == 0.19999999999999996
    _assert_as_the_gateway(inputs, signals, "llama")


def test_a_freshness_split_keeps_a_better_stale_candidate_below() -> None:
    providers = [_provider(n, "east") for n in ("p-a", "p-b", "p-c")]
    entries = [
        _entry("p-a", "east", queue_depth=0.7),
        _entry("p-b", "east", age_s=90, queue_depth=0.0),  # older than 60 s: not fresh
        _entry("p-c", "east", queue_depth=0.2),
    ]
    inputs, signals = _world("poll", providers, entries)
    default = explain(inputs, site="east", model="llama", signals=signals)
    assert _ranked(default) == [("east", "p-a"), ("east", "p-c"), ("east", "p-b")]
    result = explain(inputs, site="east", model="llama", signals=signals, as_gateway=True)
    assert _ranked(result) == [("east", "p-c"), ("east", "p-a"), ("east", "p-b")]
    stale = result.rows[2]
    assert not stale.fresh and (stale.score or 0) > (result.rows[0].score or 0)
    assert "because it is not fresh and the candidate above is" in stale.reason
    _assert_as_the_gateway(inputs, signals, "llama")


def test_equal_scores_keep_overlay_order_and_say_so() -> None:
    providers = [_provider("p-a", "east"), _provider("p-b", "east"), _provider("p-w", "west")]
    entries = [_entry("p-a", "east", queue_depth=0.3), _entry("p-b", "east", queue_depth=0.3)]
    inputs, signals = _world("poll", providers, entries)
    result = explain(inputs, site="east", model="llama", signals=signals, as_gateway=True)
    assert _ranked(result) == [("east", "p-a"), ("east", "p-b"), ("west", "p-w")]
    assert "overlay order decides (rank 0 before 1)" in result.rows[1].reason
    assert "tier cross_region sorts after same_site" in result.rows[2].reason
    assert NO_ENTRY_NOTE in result.rows[2].notes
    assert result.rows[2].missing_signals == (
        "locality",
        "queue_depth",
        "kv_cache",
        "prefix_cache",
        "latency",
        "cost",
    )
    _assert_as_the_gateway(inputs, signals, "llama")


def test_default_output_is_unchanged_and_excluded_rows_stay_as_they_are() -> None:
    providers = [_provider("p-a", "east"), _provider("p-b", "east"), _provider("p-x", "east")]
    entries = [
        _entry("p-a", "east", queue_depth=0.8),
        _entry("p-b", "east", queue_depth=0.1),
        _entry("p-x", "east", queue_depth=0.99),  # admission excluded
    ]
    inputs, signals = _world("poll", providers, entries)
    default = explain(inputs, site="east", model="llama", signals=signals)
    assert default.scored_by is None and "scored_by" not in default.as_dict()
    assert list(default.as_dict()) == [
        "network",
        "local_site",
        "model",
        "capability",
        "scoring_enabled",
        "routing_policy",
        "candidates",
    ]
    gateway = explain(inputs, site="east", model="llama", signals=signals, as_gateway=True)
    assert gateway.as_dict()["scored_by"] == "gateway"
    assert [r for r in gateway.rows if r.rank is None] == [
        r for r in default.rows if r.rank is None
    ]
    assert [r.status for r in gateway.rows] == ["ranked", "ranked", "admission_excluded"]


def test_under_gossip_as_gateway_changes_nothing_but_says_who_scored() -> None:
    providers = [_provider("p-a", "east"), _provider("p-b", "east"), _provider("p-w", "west")]
    entries = [_entry("p-a", "east", queue_depth=0.8), _entry("p-b", "east", queue_depth=0.1)]
    inputs, signals = _world("gossip", providers, entries)
    default = explain(inputs, site="east", model="llama", signals=signals)
    gateway = explain(inputs, site="east", model="llama", signals=signals, as_gateway=True)
    assert gateway.rows == default.rows
    assert default.scored_by == gateway.scored_by == "operator"
    assert {**default.as_dict(), "scored_by": "operator"} == gateway.as_dict()


def test_without_a_signals_document_the_gateway_keeps_the_overlay_order() -> None:
    providers = [_provider("p-b", "east"), _provider("p-a", "east")]
    inputs, _ = _world("poll", providers, [])
    result = explain(inputs, site="east", model="llama", as_gateway=True)
    assert _ranked(result) == [("east", "p-a"), ("east", "p-b")]
    assert [r.score for r in result.rows] == [0.5, 0.5]


_signal = st.one_of(st.none(), st.floats(0, 0.97))
_ages = st.sampled_from([1, 5, 30, 90])


@st.composite
def _worlds(draw: st.DrawFn) -> tuple[RenderInputs, SignalsDocument]:
    names = draw(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=7, unique=True))
    providers, entries = [], []
    for name in names:
        at = draw(st.sampled_from(sorted(SITES)))
        models = draw(st.sampled_from([("llama",), ("llama", "qwen"), ("qwen",)]))
        providers.append(_provider(f"p-{name}", at, models))
        if draw(st.booleans()):
            values = {
                k: v
                for k in ("queue_depth", "kv_cache_utilization", "prefix_cache_hit_ratio")
                if (v := draw(_signal)) is not None
            }
            entries.append(_entry(f"p-{name}", at, draw(_ages), **values))
    return _world("poll", providers, entries)


@settings(max_examples=60, deadline=None)
@given(_worlds(), st.sampled_from(["llama", "qwen"]))
def test_the_gateway_view_is_the_gateways_rerank_and_scores(
    world: tuple[RenderInputs, SignalsDocument], model: str
) -> None:
    inputs, signals = world
    _assert_as_the_gateway(inputs, signals, model)
    default = explain(inputs, site="east", model=model, signals=signals)
    gateway = explain(inputs, site="east", model=model, signals=signals, as_gateway=True)
    assert sorted(_ranked(default)) == sorted(_ranked(gateway))
    assert [r.rank for r in default.rows if r.rank is not None] == sorted(
        r.rank for r in gateway.rows if r.rank is not None
    )
