"""The shipped examples: the quickstart is valid and complete, each bad file fails
in exactly the way its name says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grid.adapters.manifests import load_manifests
from grid.core.resources import SITE_LABEL
from grid.core.resources.manifest import ManifestError

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart"
BAD = REPO / "examples" / "bad"
ENTRY_KEYS = {"name", "cluster", "site", "backend_kind", "models", "observed_at", "signals"}
SIGNAL_KEYS = {
    "queue_depth",
    "kv_cache_utilization",
    "prefix_cache_hit_ratio",
    "p99_latency_ms",
    "cost_per_million_input_tokens",
}


def test_quickstart_network_and_sites() -> None:
    manifests = load_manifests(QUICKSTART)
    net = manifests.networks["grid-demo"]
    (gateway,) = net.spec.gateway_refs
    assert (gateway.name, gateway.namespace, gateway.local_site_name) == (
        "edge",
        "grid-system",
        "east",
    )
    assert net.spec.tls is not None and net.spec.stale_candidate_ttl_seconds is not None
    geography = {
        name: (s.spec.region, s.spec.zone, s.spec.egress is not None, s.spec.trust is not None)
        for name, s in manifests.sites.items()
    }
    assert geography == {
        "east": ("us-east-1", "us-east-1a", True, True),
        "west": ("us-west-2", "us-west-2a", True, True),
        "central": ("us-east-1", "us-east-1b", True, True),
    }
    assert all(s.auto_discover for s in manifests.sites.values())


def test_quickstart_providers_cover_every_backend_kind_and_default_models() -> None:
    providers = load_manifests(QUICKSTART).providers
    kinds = {p.spec.backend_kind for p in providers.values()}
    assert kinds == {"local", "remote", "cloud_managed", "api_provider"}
    serving = {
        model: {
            p.spec.backend_kind
            for p in providers.values()
            for m in p.spec.models
            if m.name == model
        }
        for model in ("llama-3.1-8b-instruct", "gpt-4o-mini", "claude-sonnet-4")
    }
    assert serving["llama-3.1-8b-instruct"] >= {"local", "remote", "cloud_managed"}
    assert serving["gpt-4o-mini"] == {"api_provider"}
    assert serving["claude-sonnet-4"] == {"api_provider"}
    assert providers["vllm-east"].site_label == "east"
    assert {providers["vllm-west"].site_label, providers["vllm-central"].site_label} == {
        "west",
        "central",
    }
    strategies = {
        p.spec.provider_kind: p.spec.auth.strategy
        for p in providers.values()
        if p.spec.auth is not None
    }
    assert strategies["open_ai"] == "BearerToken"
    assert strategies["anthropic"] == "ApiKey"
    assert any(p.spec.access_policy for p in providers.values())


def test_quickstart_bearer_token_secret_is_present_with_its_key() -> None:
    manifests = load_manifests(QUICKSTART)
    auth = manifests.providers["openai"].spec.auth
    assert auth is not None and auth.secret_ref is not None
    secret = manifests.find_secret(auth.secret_ref)
    assert secret is not None and auth.secret_ref.key is not None
    assert secret.has_key(auth.secret_ref.key)


def signals() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((QUICKSTART / "signals.json").read_text())
    return doc


def test_signals_document_has_the_scope_grid_shape() -> None:
    doc = signals()
    assert doc["schema_version"] == "1.0.0"
    assert doc["network"] == "grid-demo"
    assert {"site", "epoch", "sequence", "generated_at", "providers"} <= set(doc)
    providers = load_manifests(QUICKSTART).providers
    for entry in doc["providers"]:
        assert {
            "name",
            "cluster",
            "site",
            "backend_kind",
            "models",
            "observed_at",
            "signals",
        } <= set(entry)
        provider = providers[entry["name"]]
        assert entry["cluster"] == provider.cluster
        assert entry["backend_kind"] == provider.spec.backend_kind
        assert entry["site"] == (provider.metadata.labels.get(SITE_LABEL) or doc["site"])
        assert set(entry["models"]) == {m.name for m in provider.spec.models}
        assert set(entry["signals"]) <= SIGNAL_KEYS
        for key in ("queue_depth", "kv_cache_utilization", "prefix_cache_hit_ratio"):
            if key in entry["signals"]:
                assert 0 <= entry["signals"][key] <= 1


def test_signals_include_a_missing_signal_and_a_near_excluded_provider() -> None:
    entries = signals()["providers"]
    self_hosted = [e for e in entries if e["backend_kind"] in ("local", "remote")]
    assert any(set(e["signals"]) < SIGNAL_KEYS for e in self_hosted)
    assert any(
        e["signals"].get("queue_depth", 0) >= 0.85
        or e["signals"].get("kv_cache_utilization", 0) >= 0.90
        or e.get("healthy") is False
        for e in entries
    )


BAD_CASES = [
    ("malformed-yaml.yaml", "-", "-", "malformed YAML"),
    ("unknown-kind.yaml", "GridPlanet/mars", "kind", "unknown kind"),
    ("unknown-apiversion.yaml", "GridSite/north", "apiVersion", "v1alpha1"),
    ("wrong-type.yaml", "GridNetwork/grid-bad-wrong-type", "spec.swim.gossipNodes", "integer"),
    (
        "out-of-range.yaml",
        "GridNetwork/grid-bad-out-of-range",
        "spec.admission.excluded.queueDepth",
        "less than or equal to 1",
    ),
    (
        "existing-only-above-excluded.yaml",
        "GridNetwork/grid-bad-existing-only-above-excluded",
        "spec.admission.existingOnly.queueDepth",
        "must not be above",
    ),
    (
        "unknown-field.yaml",
        "GridNetwork/grid-bad-unknown-field",
        "spec.swim.gosipNodes",
        "unknown field",
    ),
    ("duplicate-name.yaml", "GridSite/east", "metadata.name", "duplicate GridSite"),
    ("dangling-ref.yaml", "GridSite/orphan", "spec.gridNetworkRef", "grid-missing"),
    (
        "missing-secret-key.yaml",
        "InferenceProvider/openai",
        "spec.auth.secretRef.key",
        "has no key 'token'",
    ),
]


def test_every_bad_file_has_a_case() -> None:
    assert sorted(p.name for p in BAD.glob("*.yaml")) == sorted(c[0] for c in BAD_CASES)


@pytest.mark.parametrize(("name", "resource", "field", "words"), BAD_CASES)
def test_bad_example_reports_its_one_problem(
    name: str, resource: str, field: str, words: str
) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifests(BAD / name)
    (problem,) = info.value.problems
    line = str(problem)
    assert line.startswith(f"{BAD / name}:")
    assert f": {resource}: {field}: " in line
    assert words in line
    assert "do-not-print" not in line


def test_poll_spiffe_example_declares_poll_and_spiffe_trust() -> None:
    manifests = load_manifests(REPO / "examples" / "poll-spiffe")
    net = manifests.networks["grid-poll"]
    assert net.spec.signal_mode == "poll"
    assert net.spec.tls is not None
    assert (net.spec.tls.trust.mode, net.spec.tls.trust.trust_domain) == (
        "spiffe",
        "grid.example.org",
    )
    tgi = manifests.providers["vllm-eu-b"].spec.metrics_config
    assert tgi is not None and tgi.signal_names.healthy == "tgi_up"
    assert {p.spec.backend_kind for p in manifests.providers.values()} == {
        "local",
        "remote",
        "cloud_managed",
    }
