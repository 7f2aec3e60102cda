"""Resource models: defaults, wire names, strict validation and field paths."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from grid.core.resources import (
    API_VERSION,
    KINDS,
    GridNetwork,
    GridSite,
    InferenceProvider,
    InvalidResource,
    kind_info,
    parse_resource,
)
from grid.core.resources.duration import parse_duration
from grid.errors import NotFound, ValidationError


def network(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GridNetwork",
        "metadata": {"name": "grid-demo", **meta},
        "spec": spec or {},
    }


def site(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GridSite",
        "metadata": {"name": "east"},
        "spec": {"gridNetworkRef": "grid-demo", **(spec or {})},
    }


def provider(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    base = {
        "gridNetworkRef": "grid-demo",
        "backendKind": "local",
        "providerKind": "self_hosted",
        "models": [{"name": "llama-3.1-8b-instruct"}],
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceProvider",
        "metadata": {"name": "vllm-east"},
        "spec": {**base, **(spec or {})},
    }


def issue_paths(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidResource) as info:
        parse_resource(obj)
    return [issue.path for issue in info.value.issues]


def test_network_defaults_are_the_spec_values() -> None:
    net = parse_resource(network())
    assert isinstance(net, GridNetwork)
    spec = net.spec
    assert (spec.swim.gossip_nodes, spec.swim.probe_interval, spec.swim.suspicion_timeout) == (
        3,
        "5s",
        "10s",
    )
    assert spec.swim.probe_interval_s == 5.0
    assert spec.swim.suspicion_timeout_s == 10.0
    assert spec.signal_transport is None
    assert spec.signal_mode == "gossip"
    weights = spec.scoring.weights
    assert (
        weights.locality,
        weights.queue_depth,
        weights.kv_cache,
        weights.prefix_cache,
        weights.latency,
        weights.cost,
    ) == (3, 3, 2, 2, 2, 1)
    assert spec.scoring.latency_ceiling_ms == 5000
    assert spec.scoring.cost_ceiling_per_million_input_tokens == 100
    assert (spec.admission.existing_only.queue_depth, spec.admission.existing_only.kv_cache) == (
        0.85,
        0.90,
    )
    assert (spec.admission.excluded.queue_depth, spec.admission.excluded.kv_cache) == (0.98, 0.98)
    assert spec.stale_candidate_ttl_seconds is None
    assert spec.tls is None
    assert net.phase == "Pending"


def test_tls_trust_defaults_to_pin() -> None:
    net = parse_resource(
        network({"tls": {"swimKeyRef": {"name": "swim", "namespace": "grid-system", "key": "k"}}})
    )
    assert isinstance(net, GridNetwork)
    assert net.spec.tls is not None
    assert net.spec.tls.trust.mode == "pin"
    assert net.spec.tls.swim_key_ref is not None
    assert net.spec.tls.swim_key_ref.complete


def test_metrics_config_defaults_cover_vllm() -> None:
    prov = parse_resource(provider({"metricsConfig": {}}))
    assert isinstance(prov, InferenceProvider)
    metrics = prov.spec.metrics_config
    assert metrics is not None
    assert (metrics.path, metrics.interval, metrics.timeout) == ("/metrics", "15s", "2s")
    assert metrics.queue_capacity is None
    names = metrics.signal_names
    assert names.queue_depth == "vllm:num_requests_waiting"
    assert names.kv_cache_utilization == "vllm:kv_cache_usage_perc"
    assert names.prefix_cache_hit_ratio == "vllm:prefix_cache_hits/vllm:prefix_cache_queries"
    assert names.latency_p99_ms == "vllm:e2e_request_latency_seconds"


def test_provider_cluster_defaults_to_its_name() -> None:
    prov = parse_resource(provider())
    assert isinstance(prov, InferenceProvider)
    assert prov.cluster == "vllm-east"
    routed = parse_resource(provider({"routingClusterRef": "east-vllm"}))
    assert isinstance(routed, InferenceProvider)
    assert routed.cluster == "east-vllm"


def test_wire_form_is_camel_case_and_round_trips() -> None:
    net = parse_resource(network({"staleCandidateTtlSeconds": 120}))
    wire = net.to_wire()
    assert wire["spec"]["staleCandidateTtlSeconds"] == 120
    assert wire["spec"]["swim"]["gossipNodes"] == 3
    assert parse_resource(wire) == net


def test_site_fingerprint_accepts_colons_and_normalizes() -> None:
    hex64 = "ab" * 32
    colons = ":".join(["ab"] * 32)
    parsed = parse_resource(site({"trust": {"certFingerprint": colons}}))
    assert isinstance(parsed, GridSite)
    assert parsed.spec.trust is not None
    assert parsed.spec.trust.fingerprint_hex == hex64


@pytest.mark.parametrize(
    "fingerprint", ["AB" * 32, "ab" * 31, "ab" * 33, "zz" * 32, "ab:" * 31 + "ab:"]
)
def test_site_fingerprint_rejects_bad_forms(fingerprint: str) -> None:
    assert issue_paths(site({"trust": {"certFingerprint": fingerprint}})) == [
        "spec.trust.certFingerprint"
    ]


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"admission": {"excluded": {"queueDepth": 1.5, "kvCache": 0.9}}}, "queueDepth"),
        ({"admission": {"excluded": {"queueDepth": 0.9, "kvCache": -0.1}}}, "kvCache"),
        (
            {
                "admission": {
                    "existingOnly": {"queueDepth": 0.95, "kvCache": 0.5},
                    "excluded": {"queueDepth": 0.9, "kvCache": 0.9},
                }
            },
            "existingOnly.queueDepth",
        ),
    ],
)
def test_admission_thresholds_out_of_range_name_the_field(spec: dict[str, Any], path: str) -> None:
    paths = issue_paths(network(spec))
    assert len(paths) == 1
    assert paths[0].startswith("spec.admission.")
    assert paths[0].endswith(path)


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"scoring": {"weights": {"cost": -1}}}, "spec.scoring.weights.cost"),
        ({"scoring": {"latencyCeilingMs": 0}}, "spec.scoring.latencyCeilingMs"),
        ({"swim": {"gossipNodes": 0}}, "spec.swim.gossipNodes"),
        ({"swim": {"gossipNodes": "3"}}, "spec.swim.gossipNodes"),
        ({"swim": {"probeInterval": "5"}}, "spec.swim.probeInterval"),
        ({"swim": {"suspicionTimeout": "0s"}}, "spec.swim.suspicionTimeout"),
        ({"swim": {"gosipNodes": 3}}, "spec.swim.gosipNodes"),
        ({"swim": {"probeInterval": "20s"}}, "spec.swim.suspicionTimeout"),
        ({"signalTransport": {"mode": "swim"}}, "spec.signalTransport.mode"),
        ({"tls": {"trust": {"mode": "spiffe"}}}, "spec.tls.trust.trustDomain"),
        ({"seeds": ["east:7946", "nope"]}, "spec.seeds[1]"),
        ({"seeds": ["east:70000"]}, "spec.seeds[0]"),
        ({"staleCandidateTtlSeconds": 0}, "spec.staleCandidateTtlSeconds"),
        ({"gatewayRefs": [{"name": "edge"}, {"name": "edge"}]}, "spec.gatewayRefs[1].name"),
        ({"gatewayRefs": [{"namespace": "x"}]}, "spec.gatewayRefs[0].name"),
    ],
)
def test_network_validation_names_the_field(spec: dict[str, Any], path: str) -> None:
    assert issue_paths(network(spec)) == [path]


def test_all_zero_weights_are_refused() -> None:
    zero = dict.fromkeys(["locality", "queueDepth", "kvCache", "prefixCache", "latency", "cost"], 0)
    paths = issue_paths(network({"scoring": {"weights": zero}}))
    assert paths == ["spec.scoring.weights"]


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"backendKind": "moon"}, "spec.backendKind"),
        ({"providerKind": ""}, "spec.providerKind"),
        ({"models": []}, "spec.models"),
        ({"models": [{"name": "a"}, {"name": "a"}]}, "spec.models[1].name"),
        ({"models": [{"name": "a", "contextWindow": 0}]}, "spec.models[0].contextWindow"),
        ({"cost": {"perMillionInputTokens": -1}}, "spec.cost.perMillionInputTokens"),
        ({"endpoint": "ftp://x"}, "spec.endpoint"),
        ({"auth": {"strategy": "Password"}}, "spec.auth.strategy"),
        (
            {"auth": {"strategy": "ApiKey", "secretRef": {"name": "x"}}},
            "spec.auth.secretRef.namespace",
        ),
        ({"healthCheck": {"interval": "1s", "timeout": "2s"}}, "spec.healthCheck.timeout"),
        ({"metricsConfig": {"timeout": "20s"}}, "spec.metricsConfig.timeout"),
        ({"metricsConfig": {"queueCapacity": 0}}, "spec.metricsConfig.queueCapacity"),
        (
            {"metricsConfig": {"signalNames": {"queueDepth": "not a metric"}}},
            "spec.metricsConfig.signalNames.queueDepth",
        ),
        (
            {"accessPolicy": {"siteSelector": {"matchLabels": {"tier": True}}}},
            "spec.accessPolicy.siteSelector.matchLabels.tier",
        ),
    ],
)
def test_provider_validation_names_the_field(spec: dict[str, Any], path: str) -> None:
    assert issue_paths(provider(spec)) == [path]


def test_missing_required_field_is_named() -> None:
    obj = provider()
    del obj["spec"]["backendKind"]
    with pytest.raises(InvalidResource) as info:
        parse_resource(obj)
    assert info.value.path == "spec.backendKind"
    assert "required" in str(info.value)
    assert isinstance(info.value, ValidationError)


def test_unknown_field_is_rejected_with_its_name() -> None:
    with pytest.raises(InvalidResource) as info:
        parse_resource(site({"egres": {"address": "east:443"}}))
    assert info.value.path == "spec.egres"
    assert "unknown field" in str(info.value)


def test_label_keys_are_checked_and_named() -> None:
    obj = network(labels={"grid.praxis-proxy.io/site": "east", "bad key": "x"})
    with pytest.raises(InvalidResource) as info:
        parse_resource(obj)
    (issue,) = info.value.issues
    assert issue.path == 'metadata.labels["bad key"]'
    assert issue.message.startswith("key ")


def test_cluster_scoped_resources_refuse_a_namespace() -> None:
    assert issue_paths(network(namespace="default")) == ["metadata.namespace"]


def test_server_managed_metadata_is_accepted_and_dropped() -> None:
    net = parse_resource(
        network(managedFields=[{"manager": "kubectl"}], finalizers=["x"], uid="u-1", generation=4)
    )
    assert net.metadata.uid == "u-1"
    assert net.metadata.generation == 4
    assert "managedFields" not in net.to_wire()["metadata"]


def test_yaml_timestamps_stay_strings() -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    net = parse_resource(network(creationTimestamp=when))
    assert net.metadata.creation_timestamp == "2026-01-02T03:04:05Z"


def test_bad_name_and_apiversion_and_kind() -> None:
    assert issue_paths(network(name="Grid_Demo")) == ["metadata.name"]
    obj = network()
    obj["apiVersion"] = "grid.praxis-proxy.io/v1"
    assert issue_paths(obj) == ["apiVersion"]
    obj = network()
    obj["kind"] = "GridThing"
    assert issue_paths(obj) == ["kind"]


def test_messages_do_not_echo_values() -> None:
    with pytest.raises(InvalidResource) as info:
        parse_resource(network({"region": {"token": "sk-very-secret"}}))
    assert "sk-very-secret" not in str(info.value)


def test_kinds_and_names_resolve_like_kubectl() -> None:
    assert list(KINDS) == [
        "GridNetwork",
        "GridSite",
        "InferenceProvider",
        "AgentToolProvider",
        "AgentToAgentProvider",
    ]
    assert kind_info("atp").kind == "AgentToolProvider"
    assert kind_info("agenttoagentproviders").kind == "AgentToAgentProvider"
    for alias in ("gridsites", "GridSite", "gridsite", "gs"):
        assert kind_info(alias).kind == "GridSite"
    assert kind_info("ip").crd_name == "inferenceproviders.grid.praxis-proxy.io"
    with pytest.raises(NotFound):
        kind_info("pods")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5s", 5.0), ("500ms", 0.5), ("1m30s", 90.0), ("2h", 7200.0), ("1.5s", 1.5)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "s", "-5s", "0s", "5 s", "5d", "1e3s", "9" * 40 + "s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
