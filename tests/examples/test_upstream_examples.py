"""examples/upstream/: manifests written for upstream Grid apply, render and explain
unchanged, and route by their upstream fields (§2a)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from grid.adapters.manifests import load_manifests
from grid.cli import main
from grid.core.overlay import Scope
from grid.core.overlay.consumer import RenderedConsumerConfig, render_consumer_config

UPSTREAM = Path(__file__).resolve().parents[2] / "examples" / "upstream"
ALL_IN_ONE = UPSTREAM.parent / "upstream-all-in-one" / "grid.yaml"
SIGNALS = UPSTREAM / "signals.json"
SOURCES = [UPSTREAM, ALL_IN_ONE]


def grid(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def render(path: Path) -> dict[str, Any]:
    args = ["render", "-f", str(path), "--site", "cluster-east", "--gateway", "inference-gw"]
    result = grid(*args, "--signals", str(SIGNALS))
    assert result.exit_code == 0, result.output
    envelope: dict[str, Any] = json.loads(result.output)
    return envelope


@pytest.mark.parametrize("path", SOURCES, ids=["directory", "multi-document"])
def test_grid_apply_takes_them_unchanged(path: Path, tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'store.db'}"
    result = grid("apply", "-f", str(path), "--store", store)
    assert result.exit_code == 0, result.output
    listed = grid("get", "inferenceproviders", "--store", store, "-o", "json")
    assert listed.exit_code == 0
    assert {"vllm-pool", "openai-api", "anthropic-api"} <= set(listed.output.split('"')), (
        listed.output
    )


def test_the_multi_document_file_holds_the_same_set() -> None:
    one, many = load_manifests(ALL_IN_ONE), load_manifests(UPSTREAM)
    assert one.providers == many.providers
    assert one.sites == many.sites
    assert one.networks == many.networks


@pytest.mark.parametrize("path", SOURCES, ids=["directory", "multi-document"])
def test_grid_render_routes_by_the_upstream_fields(path: Path) -> None:
    envelope = render(path)
    candidates = envelope["overlay"]["candidates"]
    rows = {(c["cluster"], c["site"]): c for c in candidates}
    # siteSelector gpu=true: the vLLM pool is hosted at both GridSites.
    assert {site for cluster, site in rows if cluster == "vllm-pool"} == {
        "cluster-east",
        "cluster-west",
    }
    # admissionPolicy enterThreshold 0.85: west's 0.90 queue is existing_only.
    assert rows["vllm-pool", "cluster-west"]["admission_state"] == "existing_only"
    assert rows["vllm-pool", "cluster-east"]["admission_state"] == "new_and_existing"
    assert candidates[0]["cluster"] == "vllm-pool" and candidates[0]["site"] == "cluster-east"
    # bearer_token projects its Secret reference; api_key with auth.manual projects none.
    assert rows["openai-api", "cluster-east"]["credential"] == {
        "strategy": "bearer_token",
        "secretRef": {"name": "openai-token", "namespace": "praxis-system", "key": "token"},
    }
    assert "credential" not in rows["anthropic-api", "cluster-east"]
    # scoringPolicy queueDepth: only locality, queue depth and cost weigh in.
    breakdown = rows["vllm-pool", "cluster-east"]["score_breakdown"]
    assert breakdown["kv_cache"] == breakdown["prefix_cache"] == breakdown["latency"] == 0
    assert breakdown["locality"] == pytest.approx(3 / 7)


def test_the_directory_and_the_multi_document_file_render_the_same_revision() -> None:
    assert render(UPSTREAM)["revision"] == render(ALL_IN_ONE)["revision"]


def test_the_envelope_verifies(tmp_path: Path) -> None:
    path = tmp_path / "grid-overlay.json"
    path.write_text(json.dumps(render(UPSTREAM)))
    result = grid("overlay", "verify", str(path))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["verdict"] == "accept"


@pytest.mark.parametrize("path", SOURCES, ids=["directory", "multi-document"])
def test_grid_explain_shows_both_hosting_sites(path: Path) -> None:
    args = [
        "explain",
        "-f",
        str(path),
        "--site",
        "cluster-east",
        "--model",
        "llama-3.1-8b-instruct",
    ]
    result = grid(*args, "--signals", str(SIGNALS))
    assert result.exit_code == 0, result.output
    assert "vllm-pool@cluster-east" in result.output
    assert "vllm-pool@cluster-west" in result.output
    assert "existing_only" in result.output


def test_the_upstream_consumer_config_renders_a_complete_praxis_config() -> None:
    envelope = render(UPSTREAM)
    network = load_manifests(UPSTREAM).networks["production"]
    (ref,) = network.spec.gateway_refs
    assert ref.consumer_config is not None and ref.consumer_config.enabled
    scope = Scope(**envelope["scope"])
    rendered = render_consumer_config(envelope["overlay"], scope, ref.consumer_config)
    assert isinstance(rendered, RenderedConsumerConfig), rendered
    assert rendered.document["listeners"][0]["address"] == "0.0.0.0:8080"
    filters = {f["filter"]: f for f in rendered.document["filter_chains"][0]["filters"]}
    (credential,) = filters["credential_inject"]["credentials"]
    assert credential["file"] == "/run/secrets/grid-credentials/openai-token/token"
    clusters = {c["name"] for c in filters["load_balancer"]["clusters"]}
    assert clusters == {"vllm-pool", "openai-api", "anthropic-api"}
