"""Upstream Grid's fields (§2a), each mapping onto what the seed's spelling renders."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from grid.core.resources import (
    GridNetwork,
    GridSite,
    InferenceProvider,
    InvalidResource,
    hosting_sites,
    hosts_here,
    parse_resource,
    pinned_to,
)
from grid.core.resources.network_policy import SCORING_PRESETS
from grid.core.resources.secret import parse_secret
from grid.core.resources.seed_fields import upstream_policy_patch
from grid.core.routing.render import RenderInputs, render, scoring_config
from grid.core.routing.scoring import ScoringWeights
from grid.core.routing.signals import parse_signals

NOW = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
API = "grid.praxis-proxy.io/v1alpha1"
PIN = "ab" * 32
SEED_WEIGHTS = {"locality", "queueDepth", "kvCache", "prefixCache", "latency", "cost"}


def network(**spec: Any) -> dict[str, Any]:
    base = {"gatewayRefs": [{"name": "edge", "namespace": "ns", "localSiteName": "east"}]}
    return {
        "apiVersion": API,
        "kind": "GridNetwork",
        "metadata": {"name": "grid"},
        "spec": base | spec,
    }


def site(name: str, region: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "GridSite",
        "metadata": {"name": name, "labels": labels},
        "spec": {"gridNetworkRef": "grid", "region": region},
    }


def provider(name: str, kind: str = "local", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceProvider",
        "metadata": {"name": name},
        "spec": {
            "gridNetworkRef": "grid",
            "backendKind": kind,
            "providerKind": "self_hosted",
            "models": [{"name": "llama"}],
        }
        | spec,
    }


SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "creds", "namespace": "ns"},
    "data": {"token": "c2VjcmV0"},
}


def entry(name: str, at: str, **signals: float) -> dict[str, Any]:
    observed = datetime(2026, 1, 1, 12, tzinfo=UTC) - timedelta(seconds=5)
    return {
        "name": name,
        "cluster": name,
        "site": at,
        "backend_kind": "local",
        "models": ["llama"],
        "observed_at": observed.isoformat(),
        "signals": signals,
    }


def do_render(
    net: dict[str, Any],
    providers: list[dict[str, Any]],
    entries: list[dict[str, Any]] = (),  # type: ignore[assignment]
    sites: list[dict[str, Any]] | None = None,
) -> Any:
    sites = sites if sites is not None else [site("east", "us-east"), site("west", "us-west")]
    signals = parse_signals(
        {
            "schema_version": "1.0.0",
            "network": "grid",
            "site": "east",
            "epoch": 1,
            "sequence": 1,
            "generated_at": "2026-01-01T12:00:00Z",
            "providers": list(entries),
        }
    )
    resources = [parse_resource(o) for o in [net, *sites, *providers]]
    inputs = RenderInputs(
        networks=[r for r in resources if isinstance(r, GridNetwork)],
        sites=[r for r in resources if isinstance(r, GridSite)],
        providers=[r for r in resources if isinstance(r, InferenceProvider)],
        secrets=[parse_secret(SECRET)],
    )
    return render(inputs, site="east", gateway="edge", now=NOW, signals=signals)


# --- auth ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("upstream", "seed"),
    [
        ("api_key", "ApiKey"),
        ("bearer_token", "BearerToken"),
        ("mtls_only", "MtlsOnly"),
        ("oauth2", "Oauth2"),
        ("service_account", "ServiceAccount"),
        ("sigv4", "Sigv4"),
        ("custom", "Custom"),
    ],
)
def test_a_snake_case_strategy_renders_the_same_overlay_as_its_seed_spelling(
    upstream: str, seed: str
) -> None:
    ref = {"name": "creds", "namespace": "ns", "key": "token"}
    envelopes = [
        do_render(
            network(), [provider("p", "api_provider", auth={"strategy": s, "secretRef": ref})]
        ).envelope
        for s in (upstream, seed)
    ]
    assert envelopes[0]["revision"] == envelopes[1]["revision"]
    assert envelopes[0]["overlay"] == envelopes[1]["overlay"]
    spec = parse_resource(provider("p", auth={"strategy": upstream})).spec
    assert spec.auth is not None and spec.auth.strategy == seed


def test_an_unknown_strategy_is_still_refused_by_name() -> None:
    with pytest.raises(InvalidResource) as info:
        parse_resource(provider("p", auth={"strategy": "apikey"}))
    assert info.value.path == "spec.auth.strategy"


def test_auth_manual_projects_no_credential() -> None:
    ref = {"name": "creds", "namespace": "ns", "key": "token"}
    projected = do_render(
        network(), [provider("p", auth={"strategy": "bearer_token", "secretRef": ref})]
    )
    manual = do_render(
        network(),
        [provider("p", auth={"strategy": "bearer_token", "secretRef": ref, "manual": True})],
    )
    assert projected.overlay["candidates"][0]["credential"]["strategy"] == "bearer_token"
    assert "credential" not in manual.overlay["candidates"][0]
    assert any("auth.manual" in note for row in manual.rows for note in row.notes)


# --- siteSelector -------------------------------------------------------------------------


def test_a_site_selector_gives_one_candidate_per_selected_site_and_model() -> None:
    sites = [
        site("east", "us-east", gpu="yes"),
        site("west", "us-west", gpu="yes"),
        site("north", "eu"),
    ]
    pool = provider("pool", siteSelector={"matchLabels": {"gpu": "yes"}})
    pool["spec"]["models"] = [{"name": "llama"}, {"name": "qwen"}]
    rendered = do_render(
        network(),
        [pool],
        [entry("pool", "east", queue_depth=0.1), entry("pool", "west", queue_depth=0.2)],
        sites,
    )
    got = sorted(
        (c["site"], c["name"], c["selection_tier"]) for c in rendered.overlay["candidates"]
    )
    assert got == [
        ("east", "llama", "same_site"),
        ("east", "qwen", "same_site"),
        ("west", "llama", "cross_region"),
        ("west", "qwen", "cross_region"),
    ]


def test_an_empty_site_selector_means_the_holding_site() -> None:
    rendered = do_render(network(), [provider("p", siteSelector={"matchLabels": {}})])
    assert [c["site"] for c in rendered.overlay["candidates"]] == ["east"]


def test_a_selector_selecting_no_site_hosts_the_provider_nowhere() -> None:
    rendered = do_render(network(), [provider("p", siteSelector={"matchLabels": {"gpu": "no"}})])
    assert rendered.overlay["candidates"] == []


def test_an_operator_serves_a_selected_provider_at_its_own_site_only() -> None:
    east, west = (parse_resource(site(n, "r", gpu="yes")) for n in ("east", "west"))
    north = parse_resource(site("north", "r"))
    assert isinstance(east, GridSite) and isinstance(west, GridSite) and isinstance(north, GridSite)
    pool = parse_resource(provider("pool", siteSelector={"matchLabels": {"gpu": "yes"}}))
    assert isinstance(pool, InferenceProvider)
    assert hosting_sites(pool, [north, west, east]) == ["east", "west"]
    assert hosts_here(pool, west, "west") and not hosts_here(pool, north, "north")
    assert not hosts_here(pool, None, "east")  # no own GridSite: the selector cannot match
    pinned = pinned_to(pool, "west")
    assert pinned.site_label == "west" and pinned.spec.site_selector is None


# --- scoringPolicy and admissionPolicy -----------------------------------------------------


def test_scoring_policy_queue_depth_gives_the_documented_weights() -> None:
    net = parse_resource(network(scoringPolicy={"strategy": "queueDepth"}))
    assert isinstance(net, GridNetwork)
    assert scoring_config(net).weights == ScoringWeights(
        locality=3, queue_depth=3, kv_cache=0, prefix_cache=0, latency=0, cost=1
    )


@pytest.mark.parametrize("strategy", sorted(SCORING_PRESETS))
def test_every_preset_renders_with_its_zero_weights(strategy: str) -> None:
    rendered = do_render(
        network(scoringPolicy={"strategy": strategy}),
        [provider("p")],
        [entry("p", "east", queue_depth=0.2, kv_cache_utilization=0.4, p99_latency_ms=100)],
    )
    (candidate,) = rendered.overlay["candidates"]
    breakdown = candidate["score_breakdown"]
    kept = SCORING_PRESETS[strategy]
    for name in ("locality", "queue_depth", "kv_cache", "prefix_cache", "latency", "cost"):
        assert (breakdown[name] > 0) is (name in kept), name
    assert candidate["score"] == pytest.approx(breakdown["total"])


def test_seed_scoring_wins_over_scoring_policy_and_the_condition_says_so() -> None:
    net = parse_resource(network(scoringPolicy={"strategy": "noMetrics"}, scoring={}))
    assert isinstance(net, GridNetwork)
    assert scoring_config(net).weights == ScoringWeights()
    assert net.spec.seed_fields_won == ("scoringPolicy",)
    patch = upstream_policy_patch(net, "2026-01-01T00:00:00Z")
    (condition,) = patch["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "UpstreamPolicy",
        "False",
        "SeedFieldsWin",
    )
    written = GridNetwork.model_validate(net.to_wire() | {"status": patch})
    assert upstream_policy_patch(written, "2026-01-01T00:01:00Z") == {}


def test_applied_upstream_policies_say_mapped_and_none_writes_nothing() -> None:
    net = parse_resource(network(scoringPolicy={"strategy": "queueDepth"}))
    assert isinstance(net, GridNetwork)
    (condition,) = upstream_policy_patch(net, "2026-01-01T00:00:00Z")["conditions"]
    assert (condition["status"], condition["reason"]) == ("True", "Mapped")
    plain = parse_resource(network())
    assert isinstance(plain, GridNetwork) and upstream_policy_patch(plain, "x") == {}


PRESSURE = {
    "enterThreshold": 0.6,
    "exitThreshold": 0.4,
    "failureThreshold": 2,
    "successThreshold": 3,
    "minimumStateDuration": "10s",
    "recoveryHoldDown": "30s",
}


def admissions(net: dict[str, Any], **signals: float) -> str:
    rendered = do_render(net, [provider("p")], [entry("p", "east", **signals)] if signals else [])
    rows = {row.evaluation.candidate.provider: row for row in rendered.rows}
    return rows["p"].evaluation.admission.value


def test_enter_threshold_becomes_the_existing_only_threshold() -> None:
    net = network(admissionPolicy={"pressure": PRESSURE})
    assert admissions(net, queue_depth=0.59) == "new_and_existing"
    assert admissions(net, queue_depth=0.6) == "existing_only"
    assert admissions(net, kv_cache_utilization=0.6) == "existing_only"
    assert admissions(net, queue_depth=0.98) == "excluded"  # §2's excluded stays


def test_a_strategy_narrows_pressure_to_its_signal() -> None:
    net = network(scoringPolicy={"strategy": "queueDepth"}, admissionPolicy={"pressure": PRESSURE})
    assert admissions(net, kv_cache_utilization=0.7, queue_depth=0.1) == "new_and_existing"
    assert admissions(net, queue_depth=0.7) == "existing_only"


@pytest.mark.parametrize(
    ("missing", "state"), [("existingOnly", "existing_only"), ("excluded", "excluded")]
)
def test_missing_metrics_applies_to_a_strategy_signal(missing: str, state: str) -> None:
    policy = {"pressure": PRESSURE, "missingMetrics": missing}
    net = network(scoringPolicy={"strategy": "kvCachePressure"}, admissionPolicy=policy)
    assert admissions(net, queue_depth=0.1) == state
    assert admissions(net, kv_cache_utilization=0.1) == "new_and_existing"
    # Without a strategy, a missing ratio triggers nothing (§4).
    assert admissions(network(admissionPolicy=policy)) == "new_and_existing"


def test_api_providers_have_no_pressure_to_miss() -> None:
    policy = {"pressure": PRESSURE, "missingMetrics": "excluded"}
    net = network(scoringPolicy={"strategy": "queueDepth"}, admissionPolicy=policy)
    rendered = do_render(net, [provider("api", "api_provider")])
    assert [c["admission_state"] for c in rendered.overlay["candidates"]] == ["new_and_existing"]


def test_stabilized_holds_come_from_the_machine_and_render_applies_thresholds() -> None:
    net_obj = parse_resource(network(admissionPolicy={"mode": "stabilized", "pressure": PRESSURE}))
    assert isinstance(net_obj, GridNetwork)
    held = scoring_config(net_obj, frozenset({("east", "p")})).admission
    assert held.held == {("east", "p")}
    # grid render has no history: thresholds only.
    net = network(admissionPolicy={"mode": "stabilized", "pressure": PRESSURE})
    assert admissions(net, queue_depth=0.7) == "existing_only"


def test_seed_admission_wins_over_admission_policy() -> None:
    net = network(admissionPolicy={"pressure": PRESSURE}, admission={})
    assert admissions(net, queue_depth=0.7) == "new_and_existing"  # §2 default 0.85


@pytest.mark.parametrize(
    ("policy", "path"),
    [
        (
            {"pressure": PRESSURE | {"exitThreshold": 0.6}},
            "spec.admissionPolicy.pressure.exitThreshold",
        ),
        ({"pressure": {"enterThreshold": 0.6}}, "spec.admissionPolicy.pressure.exitThreshold"),
        ({"mode": "sometimes"}, "spec.admissionPolicy.mode"),
        ({"missingMetrics": "ignore"}, "spec.admissionPolicy.missingMetrics"),
    ],
)
def test_admission_policy_is_validated_by_field(policy: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidResource) as info:
        parse_resource(network(admissionPolicy=policy))
    assert info.value.path == path


# --- the other accepted fields -------------------------------------------------------------


def test_budget_policy_and_refresh_interval_are_validated() -> None:
    net = parse_resource(
        network(
            budgetPolicy={"tenants": [{"tenantId": "a", "capUsd": 100.0}]},
            metricsRefreshInterval="30s",
        )
    )
    assert isinstance(net, GridNetwork) and net.spec.metrics_refresh_s == 30.0
    for spec, path in (
        (
            {"budgetPolicy": {"tenants": [{"tenantId": "a", "capUsd": -1}]}},
            "spec.budgetPolicy.tenants[0].capUsd",
        ),
        (
            {
                "budgetPolicy": {
                    "tenants": [{"tenantId": "a", "capUsd": 1}, {"tenantId": "a", "capUsd": 2}]
                }
            },
            "spec.budgetPolicy.tenants[1].tenantId",
        ),
        ({"metricsRefreshInterval": "500ms"}, "spec.metricsRefreshInterval"),
    ):
        with pytest.raises(InvalidResource) as info:
            parse_resource(network(**spec))
        assert info.value.path == path


def test_metrics_endpoint_is_an_alias_of_endpoint() -> None:
    url = "https://m.example:9000"
    p = parse_resource(provider("p", metricsConfig={"metricsEndpoint": url, "interval": "5s"}))
    assert isinstance(p, InferenceProvider) and p.spec.metrics_config is not None
    assert p.spec.metrics_config.base_url == url
    assert p.spec.metrics_config.interval_s(30.0) == 5.0
    both = {"metricsEndpoint": url, "endpoint": "https://other.example:9000"}
    with pytest.raises(InvalidResource) as info:
        parse_resource(provider("p", metricsConfig=both))
    assert info.value.path == "spec.metricsConfig.metricsEndpoint"
    same = parse_resource(provider("p", metricsConfig={"metricsEndpoint": url, "endpoint": url}))
    assert isinstance(same, InferenceProvider)


def test_metrics_refresh_interval_is_the_default_scrape_interval() -> None:
    p = parse_resource(provider("p", metricsConfig={}))
    assert isinstance(p, InferenceProvider) and p.spec.metrics_config is not None
    assert p.spec.metrics_config.interval_s(30.0) == 30.0
    assert p.spec.metrics_config.interval_s() == 15.0


def test_provider_kind_is_free_form() -> None:
    p = parse_resource(provider("p", providerKind="anthropic_messages"))
    assert isinstance(p, InferenceProvider) and p.spec.provider_kind == "anthropic_messages"


def test_canonical_fingerprints_are_accepted_normalized() -> None:
    colons = ":".join(["cd"] * 32)
    obj = site("east", "r")
    obj["spec"]["trust"] = {"certFingerprint": PIN, "canonicalFingerprints": [colons, PIN]}
    s = parse_resource(obj)
    assert isinstance(s, GridSite)
    assert s.spec.accepted_fingerprints == (PIN, "cd" * 32)
    obj["spec"]["trust"] = {"canonicalFingerprints": []}
    with pytest.raises(InvalidResource) as info:
        parse_resource(obj)
    assert info.value.path == "spec.trust.certFingerprint"


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda o: o["spec"].update(placementPolicy="spread"), "spec.placementPolicy"),
        (lambda o: o["spec"].update(selectionPolicy={"seed": 1}), "spec.selectionPolicy.seed"),
        (lambda o: o["spec"]["scoringPolicy"].update(weights={}), "spec.scoringPolicy.weights"),
    ],
)
def test_fields_outside_the_list_are_still_refused(mutate: Any, path: str) -> None:
    obj = copy.deepcopy(network(scoringPolicy={"strategy": "noMetrics"}))
    mutate(obj)
    with pytest.raises(InvalidResource) as info:
        parse_resource(obj)
    assert info.value.path == path
    assert "unknown field" in str(info.value)


def test_unknown_provider_fields_are_still_refused() -> None:
    with pytest.raises(InvalidResource) as info:
        parse_resource(provider("p", capacityShare=3))
    assert info.value.path == "spec.capacityShare"
