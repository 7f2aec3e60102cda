"""Careless input to ``grid apply`` and friends: each mistake gets its own clear word."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from grid.cli import main

API = "grid.praxis-proxy.io/v1alpha1"


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:{tmp_path / 'store.db'}"


def grid(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def write(path: Path, *docs: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return str(path)


def site(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "GridSite",
        "metadata": {"name": name, **metadata},
        "spec": {"gridNetworkRef": "n"},
    }


def test_control_characters_in_names_are_escaped_in_messages(store: str, tmp_path: Path) -> None:
    result = grid(
        "apply", "-f", write(tmp_path / "a.yaml", site("x\x1b[31mred\u202e")), "--store", store
    )
    assert result.exit_code == 2
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr
    assert "x\\x1b[31mred\\u202e" in result.stderr


@pytest.mark.parametrize(
    ("name", "namespace", "field"),
    [("a..b", "default", "metadata.name"), ("ok", "a.b", "metadata.namespace")],
)
def test_config_map_names_and_namespaces_follow_dns_1123(
    name: str, namespace: str, field: str, store: str, tmp_path: Path
) -> None:
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"k": "v"},
    }
    result = grid("apply", "-f", write(tmp_path / "cm.yaml", config_map), "--store", store)
    assert result.exit_code == 2
    assert f"{field}: must be a lowercase RFC 1123" in result.stderr


@pytest.mark.parametrize(
    "endpoint", ["http://[::1", "http://[1:2]/", "http://h:99999/", "http://u@h/"]
)
def test_endpoints_must_parse_as_urls(endpoint: str, tmp_path: Path) -> None:
    provider = {
        "apiVersion": API,
        "kind": "InferenceProvider",
        "metadata": {"name": "p"},
        "spec": {
            "gridNetworkRef": "n",
            "backendKind": "local",
            "providerKind": "open_ai",
            "models": [{"name": "m"}],
            "endpoint": endpoint,
        },
    }
    result = grid("validate", "-f", write(tmp_path / "p.yaml", provider))
    assert result.exit_code == 2
    assert "spec.endpoint" in result.stderr


def test_an_input_resource_version_is_a_precondition(store: str, tmp_path: Path) -> None:
    stale = write(tmp_path / "stale.yaml", site("s", resourceVersion="99"))
    result = grid("apply", "-f", stale, "--store", store)
    assert result.exit_code == 1
    assert "carries resourceVersion but does not exist" in result.stderr
    assert (
        grid("apply", "-f", write(tmp_path / "s.yaml", site("s")), "--store", store).exit_code == 0
    )
    assert "stale" in grid("apply", "-f", stale, "--store", store).stderr
    current = yaml.safe_load(grid("get", "gridsite", "s", "-o", "yaml", "--store", store).stdout)
    fresh = write(
        tmp_path / "fresh.yaml", site("s", resourceVersion=current["metadata"]["resourceVersion"])
    )
    assert grid("apply", "-f", fresh, "--store", store).exit_code == 0


def test_an_empty_manifest_says_so(store: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("---\n# nothing here\n")
    result = grid("apply", "-f", str(empty), "--store", store)
    assert result.exit_code == 2
    assert "no resources to apply" in result.stderr


def test_a_secret_reports_every_problem_at_once(store: str, tmp_path: Path) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default"},
        "data": {"k": "not base64!!"},
        "stringData": {"bad key!": "v"},
    }
    result = grid("apply", "-f", write(tmp_path / "s.yaml", secret), "--store", store)
    assert result.exit_code == 2
    assert "data: the value of key 'k' is not valid base64" in result.stderr
    assert "stringData: keys must match" in result.stderr
    assert "not base64!!" not in result.stderr
