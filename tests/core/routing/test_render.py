"""Rendering resources and signals into an overlay, and explaining it (§4a)."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from grid.core.overlay import canonical_digest, verify
from grid.core.resources import GridNetwork, GridSite, InferenceProvider, parse_resource
from grid.core.resources.secret import parse_secret
from grid.core.routing.explain import decisive_difference, explain
from grid.core.routing.render import ExclusionReason, RenderInputs, poll_ranking, render
from grid.core.routing.rerank import rerank
from grid.core.routing.signals import parse_signals
from grid.errors import ValidationError

NOW = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
API = "grid.praxis-proxy.io/v1alpha1"


def network(**spec: Any) -> dict[str, Any]:
    base = {
        "gatewayRefs": [{"name": "edge", "namespace": "grid-system", "localSiteName": "east"}],
    }
    return {
        "apiVersion": API,
        "kind": "GridNetwork",
        "metadata": {"name": "grid"},
        "spec": base | spec,
    }


def site(name: str, region: str | None, zone: str | None, **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"gridNetworkRef": "grid"}
    if region:
        spec["region"] = region
    if zone:
        spec["zone"] = zone
    return {
        "apiVersion": API,
        "kind": "GridSite",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def provider(
    name: str, kind: str, models: list[str], at: str | None = None, **spec: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if at:
        meta["labels"] = {"grid.praxis-proxy.io/site": at}
    return {
        "apiVersion": API,
        "kind": "InferenceProvider",
        "metadata": meta,
        "spec": {
            "gridNetworkRef": "grid",
            "backendKind": kind,
            "providerKind": "self_hosted" if kind in ("local", "remote") else "open_ai",
            "models": [{"name": m} for m in models],
        }
        | spec,
    }


def world() -> dict[str, Any]:
    """A small grid: three sites, five providers, one Secret, one signals document."""
    return {
        "networks": [network()],
        "sites": [
            site("east", "us-east", "us-east-1a", tier="gold"),
            site("central", "us-east", "us-east-1b"),
            site("west", "us-west", "us-west-2a"),
        ],
        "providers": [
            provider("vllm-east", "local", ["llama"]),  # no label: --site
            provider("vllm-central", "remote", ["llama"], at="central"),
            provider("vllm-west", "remote", ["llama"], at="west"),
            provider(
                "openai",
                "api_provider",
                ["gpt-4o-mini"],
                cost={"perMillionInputTokens": 50},
                auth={
                    "strategy": "BearerToken",
                    "secretRef": {"name": "creds", "namespace": "grid-system", "key": "api-key"},
                },
            ),
            provider(
                "bedrock",
                "cloud_managed",
                ["claude", "llama"],
                accessPolicy={"siteSelector": {"matchLabels": {"tier": "gold"}}},
            ),
        ],
        "secrets": [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "creds", "namespace": "grid-system"},
                "data": {"api-key": "c2VjcmV0"},
            }
        ],
        "signals": {
            "schema_version": "1.0.0",
            "network": "grid",
            "site": "east",
            "epoch": 1,
            "sequence": 1,
            "generated_at": "2026-01-01T12:00:00Z",
            "providers": [
                entry("vllm-east", "east", queue_depth=0.1, kv_cache_utilization=0.2),
                entry("vllm-central", "central", queue_depth=0.1),
                entry("vllm-west", "west", queue_depth=0.0),
                entry("openai", "east", cost_per_million_input_tokens=10),
            ],
        },
    }


def entry(name: str, at: str, age_s: float = 5, **signals: float) -> dict[str, Any]:
    observed = datetime(2026, 1, 1, 12, tzinfo=UTC) - timedelta(seconds=age_s)
    return {
        "name": name,
        "cluster": name,
        "site": at,
        "backend_kind": "local",
        "models": [],
        "observed_at": observed.isoformat(),
        "signals": signals,
    }


def build(w: dict[str, Any]) -> tuple[RenderInputs, Any]:
    resources = [parse_resource(o) for o in w["networks"] + w["sites"] + w["providers"]]
    inputs = RenderInputs(
        networks=[r for r in resources if isinstance(r, GridNetwork)],
        sites=[r for r in resources if isinstance(r, GridSite)],
        providers=[r for r in resources if isinstance(r, InferenceProvider)],
        secrets=[parse_secret(s) for s in w["secrets"]],
    )
    return inputs, parse_signals(w["signals"]) if w.get("signals") else None


def do_render(w: dict[str, Any], **kwargs: Any) -> Any:
    inputs, signals = build(w)
    args = {"site": "east", "gateway": "edge", "now": NOW, "signals": signals} | kwargs
    return render(inputs, **args)


def by_cluster(rendered: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["cluster"], c["name"]): c for c in rendered.overlay["candidates"]}


def test_one_candidate_per_provider_and_model_in_sort_order() -> None:
    rendered = do_render(world())
    order = [(c["cluster"], c["name"], c["site"]) for c in rendered.overlay["candidates"]]
    # Same-site first (vllm-east local, then openai/bedrock at east as api/cloud),
    # then same_region central, then cross_region west.
    assert order == [
        ("vllm-east", "llama", "east"),
        ("openai", "gpt-4o-mini", "east"),
        ("bedrock", "claude", "east"),
        ("bedrock", "llama", "east"),
        ("vllm-central", "llama", "central"),
        ("vllm-west", "llama", "west"),
    ]
    tiers = [c["selection_tier"] for c in rendered.overlay["candidates"]]
    assert tiers == ["same_site"] * 4 + ["same_region", "cross_region"]
    assert rendered.overlay["local_site"] == "east"
    assert rendered.scope.as_dict() == {
        "network": "grid",
        "gateway": "edge",
        "namespace": "grid-system",
        "local_site": "east",
    }


def test_scores_follow_the_spec_arithmetic() -> None:
    got = by_cluster(do_render(world()))
    # vllm-east: locality 1, queue .1 -> .9, kv .2 -> .8, prefix/latency/cost missing:
    # (3*1 + 3*.9 + 2*.8 + 2*.5 + 2*.5 + 1*.5)/13 = (3+2.7+1.6+1+1+.5)/13 = 9.8/13
    assert got[("vllm-east", "llama")]["score"] == pytest.approx(9.8 / 13)
    # openai: api .1; the signal's cost 10 overrides the spec's 50 -> 1 - 10/100 = .9:
    # (.3 + 1.5 + 1 + 1 + 1 + .9)/13 = 5.7/13
    assert got[("openai", "gpt-4o-mini")]["score"] == pytest.approx(5.7 / 13)
    assert got[("openai", "gpt-4o-mini")]["score_breakdown"]["cost"] == pytest.approx(0.9 / 13)
    # central: remote same region .7, queue .1 -> .9: (2.1+2.7+1+1+1+.5)/13 = 8.3/13
    assert got[("vllm-central", "llama")]["score"] == pytest.approx(8.3 / 13)
    # west: cross region .4, queue 0 -> 1: (1.2+3+1+1+1+.5)/13 = 7.7/13
    assert got[("vllm-west", "llama")]["score"] == pytest.approx(7.7 / 13)


def test_spec_cost_applies_without_a_signal() -> None:
    w = world()
    w["signals"]["providers"] = w["signals"]["providers"][:3]
    got = by_cluster(do_render(w))
    # cost 50 -> 1 - 50/100 = .5: (.3+1.5+1+1+1+.5)/13 = 5.3/13
    assert got[("openai", "gpt-4o-mini")]["score"] == pytest.approx(5.3 / 13)


def test_local_site_defaults_to_site_flag_without_local_site_name() -> None:
    w = world()
    w["networks"] = [network(gatewayRefs=[{"name": "edge"}])]
    rendered = do_render(w, site="west")
    assert rendered.overlay["local_site"] == "west"
    assert rendered.scope.namespace == "default"
    got = by_cluster(rendered)
    # Unlabelled vllm-east now sits at --site "west" too.
    assert got[("vllm-east", "llama")]["site"] == "west"
    assert got[("vllm-west", "llama")]["selection_tier"] == "same_site"


def test_credential_reference_only_for_bearer_and_api_key() -> None:
    w = world()
    w["providers"][1]["spec"]["auth"] = {
        "strategy": "MtlsOnly",
        "secretRef": {"name": "creds", "namespace": "grid-system", "key": "api-key"},
    }
    w["providers"][2]["spec"]["auth"] = {
        "strategy": "ApiKey",
        "secretRef": {"name": "absent", "namespace": "grid-system", "key": "k"},
    }
    w["providers"][4]["spec"]["auth"] = {
        "strategy": "ApiKey",
        "secretRef": {"name": "creds", "namespace": "grid-system"},  # no key: incomplete
    }
    got = by_cluster(do_render(w))
    assert got[("openai", "gpt-4o-mini")]["credential"] == {
        "strategy": "bearer_token",
        "secretRef": {"name": "creds", "namespace": "grid-system", "key": "api-key"},
    }
    assert "credential" not in got[("vllm-central", "llama")]
    assert got[("vllm-west", "llama")]["credential"]["strategy"] == "api_key"
    assert "credential" not in got[("bedrock", "claude")]


def test_missing_secret_key_is_refused_naming_the_field() -> None:
    w = world()
    w["providers"][3]["spec"]["auth"]["secretRef"]["key"] = "token"
    with pytest.raises(ValidationError, match=r"spec\.auth\.secretRef\.key.*'token'"):
        do_render(w)


def test_unhealthy_unavailable_and_admission_excluded_are_removed() -> None:
    w = world()
    w["signals"]["providers"][1]["healthy"] = False  # vllm-central
    w["signals"]["providers"][2]["signals"]["kv_cache_utilization"] = 0.98  # vllm-west
    w["providers"][0]["status"] = {"phase": "Unavailable"}  # vllm-east
    rendered = do_render(w)
    assert {c["cluster"] for c in rendered.overlay["candidates"]} == {"openai", "bedrock"}
    reasons = {r.evaluation.candidate.cluster: r.exclusion for r in rendered.rows if r.exclusion}
    assert reasons == {
        "vllm-central": ExclusionReason.UNHEALTHY,
        "vllm-west": ExclusionReason.ADMISSION_EXCLUDED,
        "vllm-east": ExclusionReason.PROVIDER_UNAVAILABLE,
    }


def test_existing_only_sorts_after_new_and_existing() -> None:
    w = world()
    w["signals"]["providers"][0]["signals"]["queue_depth"] = 0.85  # at the threshold
    got = do_render(w).overlay["candidates"]
    assert got[-1]["cluster"] == "vllm-east"
    assert got[-1]["admission_state"] == "existing_only"


def test_degraded_phase_and_stale_signal_are_not_fresh() -> None:
    w = world()
    w["providers"][1]["status"] = {"phase": "Degraded"}
    w["signals"]["providers"][2] = entry("vllm-west", "west", age_s=61, queue_depth=0.0)
    got = by_cluster(do_render(w))
    assert got[("vllm-central", "llama")]["fresh"] is False
    assert got[("vllm-west", "llama")]["fresh"] is False
    assert got[("vllm-east", "llama")]["fresh"] is True
    assert got[("bedrock", "claude")]["fresh"] is True  # no entry: signals missing, not stale


@pytest.mark.parametrize(
    ("labels", "gateway_site_known", "admitted"),
    [
        ({}, True, True),  # empty matchLabels admits every site
        ({"tier": "gold"}, True, True),
        ({"tier": "gold", "zone": "a"}, True, False),  # every pair must match
        ({"tier": "silver"}, True, False),
        ({}, False, True),
        ({"tier": "gold"}, False, False),  # unknown gateway site: fail closed
    ],
)
def test_access_policy(labels: dict[str, str], gateway_site_known: bool, admitted: bool) -> None:
    w = world()
    w["providers"][4]["spec"]["accessPolicy"] = {"siteSelector": {"matchLabels": labels}}
    if not gateway_site_known:
        w["sites"] = w["sites"][1:]
    rendered = do_render(w)
    present = any(c["cluster"] == "bedrock" for c in rendered.overlay["candidates"])
    assert present is admitted
    if not admitted:
        denied = [r for r in rendered.rows if r.evaluation.candidate.cluster == "bedrock"]
        assert {r.exclusion for r in denied} == {ExclusionReason.ACCESS_DENIED}


def test_identical_inputs_give_identical_revision_and_bytes() -> None:
    one = do_render(world())
    two = do_render(world(), now=NOW + timedelta(minutes=5))
    assert one.envelope["revision"] == two.envelope["revision"]
    assert one.envelope["overlay"]["candidates"] == two.envelope["overlay"]["candidates"]
    changed = world()
    changed["signals"]["providers"][0]["signals"]["queue_depth"] = 0.3
    assert do_render(changed).envelope["revision"] != one.envelope["revision"]


def test_envelope_verifies_against_its_scope() -> None:
    rendered = do_render(world())
    verdict = verify(rendered.envelope, rendered.scope)
    assert verdict.verdict == "accept"
    assert verdict.revision == canonical_digest(rendered.overlay)


def test_poll_mode_renders_without_scores() -> None:
    w = world()
    w["networks"][0]["spec"]["signalTransport"] = {"mode": "poll"}
    rendered = do_render(w)
    assert all("score" not in c for c in rendered.overlay["candidates"])
    assert verify(rendered.envelope).verdict == "accept"


def test_network_scoring_settings_are_honoured() -> None:
    w = world()
    w["networks"][0]["spec"]["scoring"] = {
        "weights": {
            "locality": 0,
            "queueDepth": 1,
            "kvCache": 0,
            "prefixCache": 0,
            "latency": 0,
            "cost": 0,
        }
    }
    w["networks"][0]["spec"]["admission"] = {
        "existingOnly": {"queueDepth": 0.05, "kvCache": 0.9},
        "excluded": {"queueDepth": 0.5, "kvCache": 0.98},
    }
    got = by_cluster(do_render(w))
    # Only the queue counts: vllm-west queue 0 -> score 1.0.
    assert got[("vllm-west", "llama")]["score"] == 1.0
    # queue .1 >= existingOnly .05.
    assert got[("vllm-east", "llama")]["admission_state"] == "existing_only"


def test_stale_candidate_ttl_evicts_old_remote_candidates_only() -> None:
    w = world()
    w["networks"][0]["spec"]["staleCandidateTtlSeconds"] = 30
    w["signals"]["providers"][0] = entry("vllm-east", "east", age_s=40)  # local: kept
    w["signals"]["providers"][2] = entry("vllm-west", "west", age_s=40)  # remote: evicted
    rendered = do_render(w)
    clusters = {c["cluster"] for c in rendered.overlay["candidates"]}
    assert "vllm-east" in clusters and "vllm-west" not in clusters
    evicted = [r for r in rendered.rows if r.exclusion is ExclusionReason.STALE_EVICTED]
    assert [r.evaluation.candidate.cluster for r in evicted] == ["vllm-west"]


def test_overlay_keeps_the_top_1024_candidates() -> None:
    w = world()
    w["providers"].append(provider("big", "local", [f"m{i:04d}" for i in range(1100)]))
    rendered = do_render(w)
    candidates = rendered.overlay["candidates"]
    assert len(candidates) == 1024
    assert [c["rank"] for c in candidates] == list(range(1024))
    over = [r for r in rendered.rows if r.exclusion is ExclusionReason.CANDIDATE_LIMIT]
    assert len(over) == 1100 + 6 - 1024
    assert verify(rendered.envelope).verdict == "accept"


def test_duplicate_routing_identity_is_refused() -> None:
    w = world()
    w["providers"][0]["spec"]["routingClusterRef"] = "shared"
    w["providers"].append(provider("vllm-east-2", "local", ["llama"], routingClusterRef="shared"))
    with pytest.raises(ValidationError, match="routingClusterRef"):
        do_render(w)


def test_duplicate_routing_identity_names_the_first_collision_in_provider_order() -> None:
    # Providers render in name order; sharing a cluster is fine until two of
    # them route the same model at the same site. "b-2" collides with "b-1" on
    # "llama" before "c-2" collides with "c-1", and "a-*" share a cluster but
    # serve different models.
    w = world()
    w["providers"] += [
        provider("a-1", "local", ["m1"], at="west", routingClusterRef="shared-a"),
        provider("a-2", "local", ["m2"], at="west", routingClusterRef="shared-a"),
        provider("b-1", "local", ["x", "llama"], at="central", routingClusterRef="shared-b"),
        provider("b-2", "local", ["llama", "y"], at="central", routingClusterRef="shared-b"),
        provider("c-1", "local", ["llama"], at="west", routingClusterRef="shared-c"),
        provider("c-2", "local", ["llama"], at="west", routingClusterRef="shared-c"),
        provider("d-1", "local", ["llama"], at="east", routingClusterRef="shared-b"),
    ]
    with pytest.raises(ValidationError) as caught:
        do_render(w)
    assert str(caught.value) == (
        "InferenceProvider/b-2 and InferenceProvider/b-1 both route model 'llama' at site "
        "'central' through cluster 'shared-b'; give one a distinct spec.routingClusterRef"
    )
    w["providers"] = [p for p in w["providers"] if p["metadata"]["name"] not in ("b-2", "c-2")]
    assert len(do_render(w).overlay["candidates"]) > 0


def test_unknown_gateway_and_foreign_signals_are_refused() -> None:
    with pytest.raises(ValidationError, match="gateway 'nope'"):
        do_render(world(), gateway="nope")
    with pytest.raises(ValidationError, match="gateway 'edge'"):
        do_render(world(), namespace="other")
    w = world()
    w["signals"]["network"] = "other"
    with pytest.raises(ValidationError, match="network 'other'"):
        do_render(w)


def test_explain_lists_every_candidate_with_reasons() -> None:
    w = world()
    w["signals"]["providers"][1]["healthy"] = False
    w["sites"][0]["metadata"]["labels"] = {}
    inputs, signals = build(w)
    result = explain(inputs, site="east", model="llama", signals=signals)
    rows = {r.provider: r for r in result.rows}
    assert list(rows) == ["vllm-east", "vllm-west", "bedrock", "vllm-central"]
    assert [r.rank for r in result.rows] == [0, 2, None, None]
    assert rows["vllm-east"].reason.startswith("first for this model")
    assert "tier cross_region sorts after same_site" in rows["vllm-west"].reason
    assert rows["bedrock"].status == "access_denied"
    assert "tier" in rows["bedrock"].reason
    assert rows["vllm-central"].status == "unhealthy"
    assert rows["vllm-central"].signal_scores["locality"] == 0.7
    assert rows["vllm-east"].missing_signals == ("prefix_cache", "latency", "cost")
    assert rows["vllm-east"].signal_values["queue_depth"] == 0.1
    as_json = result.as_dict()
    assert as_json["model"] == "llama" and len(as_json["candidates"]) == 4


def test_decisive_difference_names_each_sort_key() -> None:
    inputs, signals = build(world())
    rendered = render(inputs, site="east", gateway="edge", now=NOW, signals=signals)
    evaluation = rendered.rows[0].evaluation
    cand = evaluation.candidate
    worse = replace(evaluation, score=(evaluation.score or 0) - 0.1)
    assert decisive_difference(evaluation, worse).startswith("score")
    stale = replace(evaluation, candidate=replace(cand, fresh=False))
    assert "not fresh" in decisive_difference(evaluation, stale)
    older = replace(evaluation, candidate=replace(cand, observed_at=None))
    assert "older" in decisive_difference(evaluation, older)
    other = replace(evaluation, candidate=replace(cand, cluster="zzz"))
    assert "(site, name, cluster)" in decisive_difference(evaluation, other)


def test_render_does_not_mutate_inputs() -> None:
    w = world()
    before = copy.deepcopy(w)
    do_render(w)
    assert w == before


def test_input_order_does_not_change_the_overlay() -> None:
    w = world()
    shuffled = copy.deepcopy(w)
    shuffled["providers"].reverse()
    shuffled["sites"].reverse()
    shuffled["signals"]["providers"].reverse()
    one, two = do_render(w), do_render(shuffled)
    assert one.envelope["revision"] == two.envelope["revision"]
    assert one.overlay == two.overlay


def test_a_poll_overlay_reranked_by_the_gateway_matches_the_gossip_order() -> None:
    """Poll mode moves scoring to the gateway; with every sample fresh the order is the same."""
    w = world()
    kinds = {"openai": "api_provider", "bedrock": "cloud_managed"}
    w["signals"]["providers"].append(entry("bedrock", "east", queue_depth=0.3))
    for e in w["signals"]["providers"]:
        e["backend_kind"] = kinds.get(e["name"], "local")
    w["networks"][0]["spec"]["scoring"] = {"weights": {"locality": 0.5, "cost": 4}}
    gossip = do_render(w)
    assert poll_ranking(gossip) is None
    w["networks"][0]["spec"]["signalTransport"] = {"mode": "poll"}
    poll = do_render(w)
    ranking = poll_ranking(poll)
    assert ranking is not None and ranking.config.enabled
    assert ranking.config.weights.cost == 4 and set(ranking.geographies) == {
        "east",
        "central",
        "west",
    }

    class View:
        def __init__(self, raw: dict[str, Any]) -> None:
            self.kind, self.name, self.site = raw["kind"], raw["name"], raw["site"]
            self.cluster, self.fresh = raw["cluster"], raw["fresh"]
            self.admission, self.tier = raw["admission_state"], raw["selection_tier"]

    def order(candidates: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(c["cluster"], c["name"]) for c in candidates]

    views = [View(c) for c in poll.overlay["candidates"]]
    by_id = {id(v): c for v, c in zip(views, poll.overlay["candidates"], strict=True)}
    _, signals = build(w)
    reranked = [by_id[id(v)] for v in rerank(views, signals, ranking)]
    assert order(reranked) == order(gossip.overlay["candidates"])
    assert order(reranked) != order(poll.overlay["candidates"])
