"""`render_consumer_config`: the §11 praxis.yaml shape, its fail-closed reasons and quoting."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.overlay import Scope
from grid.core.overlay.consumer import (
    ConsumerConfigError,
    RenderedConsumerConfig,
    render_consumer_config,
)
from grid.core.resources.network_spec import ConsumerSpec

SCOPE = Scope("net", "edge", "grid-system", "east")
OPERATOR_ONLY = ("stable_id", "admission_state", "selection_tier", "rank", "generated_at")


def _candidate(name: str, cluster: str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "inference_model",
        "name": name,
        "site": "east",
        "cluster": cluster,
        "fresh": True,
        "stable_id": "0000beef",
        "admission_state": "new_and_existing",
        "selection_tier": "same_site",
        "rank": 0,
        "score": 0.5,
        **extra,
    }


def _overlay(*candidates: dict[str, Any]) -> dict[str, Any]:
    return {
        "network": "net",
        "local_site": "east",
        "candidates": list(candidates),
        "generated_at": "2026-01-01T00:00:00.000Z",
    }


def _config(*endpoints: dict[str, Any], **fields: Any) -> ConsumerSpec:
    return ConsumerSpec.model_validate(
        {"enabled": True, "clusterEndpoints": list(endpoints), **fields}
    )


PLAIN = {"cluster": "c1", "address": "127.0.0.1:9000", "transport": {"mode": "plaintext"}}
MTLS = {
    "cluster": "c2",
    "address": "west.example:8443",
    "transport": {"mode": "mutual_tls", "sni": "c2.example"},
}
CREDENTIAL = {
    "strategy": "bearer_token",
    "secretRef": {"name": "openai", "namespace": "ns", "key": "token"},
}


def _rendered(result: RenderedConsumerConfig | ConsumerConfigError) -> RenderedConsumerConfig:
    assert isinstance(result, RenderedConsumerConfig), result
    return result


def _filters(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["filter"]: f for f in document["filter_chains"][0]["filters"]}


def test_defaults_are_the_spec_values() -> None:
    config = ConsumerSpec()
    assert config.enabled is False
    assert config.config_map_name == "praxis-consumer-config"
    assert config.listener_port == 8080
    assert config.credential_mount_base == "/run/secrets/grid-credentials"
    assert config.tls_cert_mount_path == "/etc/praxis/tls"
    assert config.cluster_endpoints == []


def test_inline_render_has_the_section_11_shape() -> None:
    overlay = _overlay(_candidate("m", "c1"), _candidate("m", "c2", credential=CREDENTIAL))
    rendered = _rendered(render_consumer_config(overlay, SCOPE, _config(PLAIN, MTLS)))
    document = yaml.safe_load(rendered.text)
    assert document == rendered.document
    assert document["listeners"] == [
        {"name": "public", "address": "0.0.0.0:8080", "filter_chains": ["consumer-chain"]}
    ]
    assert document["admin"] == {"address": "127.0.0.1:9901"}
    assert document["shutdown_timeout_secs"] == 5
    filters = _filters(document)
    assert list(filters) == [
        "client_auth",
        "json_body_field",
        "intelligent_route",
        "credential_inject",
        "load_balancer",
    ]
    assert filters["json_body_field"] == {
        "filter": "json_body_field",
        "field": "model",
        "header": "X-Model",
    }
    route = filters["intelligent_route"]
    assert route["local_site"] == "east" and route["model_header"] == "X-Model"
    assert [c["cluster"] for c in route["candidates"]] == ["c1", "c2"]
    assert route["candidates"][1]["credential"] == CREDENTIAL
    assert filters["credential_inject"]["credentials"] == [
        {
            "name": "openai",
            "namespace": "ns",
            "key": "token",
            "strategy": "bearer_token",
            "file": "/run/secrets/grid-credentials/openai/token",
        }
    ]
    c1, c2 = filters["load_balancer"]["clusters"]
    assert c1 == {"name": "c1", "endpoints": ["127.0.0.1:9000"]}
    assert c2["tls"] == {
        "ca": {"ca_path": "/etc/praxis/tls/ca.crt"},
        "client_cert": {
            "cert_path": "/etc/praxis/tls/tls.crt",
            "key_path": "/etc/praxis/tls/tls.key",
        },
        "sni": "c2.example",
        "verify": True,
    }
    for field in OPERATOR_ONLY:
        assert field not in rendered.text


def test_overlay_file_mode_names_the_file_and_scope_and_no_candidates() -> None:
    overlay = _overlay(_candidate("m", "c1"))
    rendered = _rendered(
        render_consumer_config(overlay, SCOPE, _config(PLAIN), overlay_file="/o/grid-overlay.json")
    )
    route = _filters(rendered.document)["intelligent_route"]
    assert route["overlay_file"] == "/o/grid-overlay.json"
    assert route["expected_scope"] == SCOPE.as_dict()
    assert "candidates" not in route
    assert "credential_inject" not in _filters(rendered.document)


def test_one_credential_entry_and_one_cluster_per_distinct_reference() -> None:
    overlay = _overlay(
        _candidate("a", "c1", credential=CREDENTIAL),
        _candidate("b", "c1", credential=CREDENTIAL),
    )
    filters = _filters(_rendered(render_consumer_config(overlay, SCOPE, _config(PLAIN))).document)
    assert len(filters["credential_inject"]["credentials"]) == 1
    assert len(filters["load_balancer"]["clusters"]) == 1


@pytest.mark.parametrize(
    ("endpoint", "reason"),
    [
        (
            {"cluster": "other", "address": "h:1", "transport": {"mode": "plaintext"}},
            "MissingClusterEndpoint",
        ),
        ({"cluster": "c1", "address": "h:1"}, "MissingTransport"),
        ({"cluster": "c1", "address": "h:1", "transport": {"mode": "mutual_tls"}}, "MissingSni"),
        (
            {"cluster": "c1", "address": "h:1", "transport": {"mode": "plaintext", "sni": "x"}},
            "PlaintextWithSni",
        ),
    ],
)
def test_each_fail_closed_reason(endpoint: dict[str, Any], reason: str) -> None:
    result = render_consumer_config(_overlay(_candidate("m", "c1")), SCOPE, _config(endpoint))
    assert isinstance(result, ConsumerConfigError)
    assert result.reason == reason
    assert "c1" in result.message


def test_the_first_cluster_in_overlay_order_decides_the_reason() -> None:
    overlay = _overlay(_candidate("m", "c2"), _candidate("m", "c1"))
    bad_c1 = {"cluster": "c1", "address": "h:1"}
    bad_c2 = {"cluster": "c2", "address": "h:1", "transport": {"mode": "mutual_tls"}}
    result = render_consumer_config(overlay, SCOPE, _config(bad_c1, bad_c2))
    assert isinstance(result, ConsumerConfigError) and result.reason == "MissingSni"


def test_duplicate_cluster_endpoints_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate cluster"):
        _config(PLAIN, PLAIN)


_texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(name=_texts, site=_texts, cluster=_texts, secret=_texts, key=_texts, sni=_texts)
def test_every_dynamic_string_round_trips(
    name: str, site: str, cluster: str, secret: str, key: str, sni: str
) -> None:
    candidate = _candidate(name, cluster, site=site)
    candidate["credential"] = {
        "strategy": "api_key",
        "secretRef": {"name": secret, "namespace": "ns", "key": key},
    }
    overlay = {**_overlay(candidate), "local_site": site}
    endpoint = {
        "cluster": cluster,
        "address": "h:1",
        "transport": {"mode": "mutual_tls", "sni": sni},
    }
    rendered = _rendered(render_consumer_config(overlay, SCOPE, _config(endpoint)))
    assert yaml.safe_load(rendered.text) == rendered.document
    route = _filters(rendered.document)["intelligent_route"]
    assert route["candidates"][0]["name"] == name


@pytest.mark.parametrize("name", ["a: b", "- x", "true", "null", "1e3", "#c", "'q'", "*a", "&b"])
def test_yaml_lookalike_model_names_stay_strings(name: str) -> None:
    rendered = _rendered(
        render_consumer_config(_overlay(_candidate(name, "c1")), SCOPE, _config(PLAIN))
    )
    parsed = yaml.safe_load(rendered.text)
    assert _filters(parsed)["intelligent_route"]["candidates"][0]["name"] == name


def test_client_auth_is_rendered_first_with_file_references_only() -> None:
    overlay = _overlay(_candidate("m", "c1"))

    def auth(client_auth: dict[str, Any], default: str | None = None) -> dict[str, Any]:
        config = _config(PLAIN, clientAuth=client_auth, credentialMountBase="/keys/")
        rendered = _rendered(render_consumer_config(overlay, SCOPE, config, default_tenant=default))
        assert yaml.safe_load(rendered.text) == rendered.document
        first = rendered.document["filter_chains"][0]["filters"][0]
        assert first["filter"] == "client_auth"
        return dict(first)

    ref = {"name": "grid-client-keys", "namespace": "ns", "key": "keys.yaml"}
    assert auth({"mode": "apiKey", "secretRef": ref}, "ignored") == {
        "filter": "client_auth",
        "mode": "api_key",
        "keys_file": "/keys/grid-client-keys/keys.yaml",
    }
    assert auth({"mode": "mtls"})["tls"] == {
        "ca_path": "/etc/praxis/tls/ca.crt",
        "cert_path": "/etc/praxis/tls/tls.crt",
        "key_path": "/etc/praxis/tls/tls.key",
    }
    assert auth({}, "acme") == {"filter": "client_auth", "mode": "none", "default_tenant": "acme"}
    assert auth({}) == {"filter": "client_auth", "mode": "none"}


@pytest.mark.parametrize(
    "client_auth",
    [
        {"mode": "apiKey"},
        {"mode": "apiKey", "secretRef": {"name": "k", "namespace": "ns"}},
        {"mode": "mtls", "secretRef": {"name": "k", "namespace": "ns", "key": "x"}},
        {"mode": "basic"},
    ],
)
def test_a_client_auth_without_its_secret_or_with_a_stray_one_is_refused(
    client_auth: dict[str, Any],
) -> None:
    with pytest.raises(ValueError, match="clientAuth"):
        _config(PLAIN, clientAuth=client_auth)


def test_clusters_and_credentials_are_listed_in_a_fixed_order_not_rank_order() -> None:
    other = {
        "strategy": "bearer_token",
        "secretRef": {"name": "anthropic", "namespace": "ns", "key": "token"},
    }
    ranked = [
        _candidate("m", "c2", credential=CREDENTIAL),
        _candidate("m", "c1", credential=other),
    ]
    config = _config(PLAIN, MTLS)
    texts = []
    for order in (ranked, ranked[::-1]):
        rendered = _rendered(
            render_consumer_config(_overlay(*order), SCOPE, config, overlay_file="/o/e.json")
        )
        filters = _filters(rendered.document)
        assert [c["name"] for c in filters["load_balancer"]["clusters"]] == ["c1", "c2"]
        names = [c["name"] for c in filters["credential_inject"]["credentials"]]
        assert names == ["anthropic", "openai"]
        texts.append(rendered.text)
    assert texts[0] == texts[1]


def test_the_first_failing_cluster_in_overlay_order_is_the_reason() -> None:
    # c2 (no transport) ranks above c1 (no endpoint): the reason is c2's.
    no_transport = {"cluster": "c2", "address": "127.0.0.1:9001"}
    overlay = _overlay(_candidate("m", "c2"), _candidate("m", "c1"))
    result = render_consumer_config(overlay, SCOPE, _config(no_transport))
    assert isinstance(result, ConsumerConfigError) and result.reason == "MissingTransport"
