"""`grid apply`, `grid get` and `grid delete` against a real SQLite store file."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from grid.adapters.store.sqlite import SqliteStore
from grid.cli import main
from grid.core.resources import parse_resource

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUICKSTART = EXAMPLES / "quickstart"


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:{tmp_path / 'store.db'}"


def grid(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def write(path: Path, *docs: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return path


def network(name: str = "grid-demo", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "GridNetwork",
        "metadata": {"name": name},
        "spec": spec or {"region": "us-east-1"},
    }


def test_apply_creates_then_reports_unchanged(store: str) -> None:
    first = grid("apply", "-f", str(QUICKSTART), "--store", store)
    assert first.exit_code == 0, first.output
    lines = first.stdout.splitlines()
    assert "gridnetwork.grid.praxis-proxy.io/grid-demo created" in lines
    assert "gridsite.grid.praxis-proxy.io/east created" in lines
    assert "inferenceprovider.grid.praxis-proxy.io/vllm-east created" in lines
    assert "secret/openai-credentials created" in lines
    # Dependency order: the network before sites, sites before providers.
    assert lines.index("gridnetwork.grid.praxis-proxy.io/grid-demo created") < lines.index(
        "gridsite.grid.praxis-proxy.io/east created"
    )
    again = grid("apply", "-f", str(QUICKSTART), "--store", store)
    assert again.exit_code == 0
    assert again.stdout.splitlines() == [line.replace("created", "unchanged") for line in lines]


def test_apply_configures_changes_and_bumps_generation_only_for_spec(
    store: str, tmp_path: Path
) -> None:
    path = tmp_path / "net.yaml"
    grid("apply", "-f", str(write(path, network())), "--store", store)
    relabeled = network()
    relabeled["metadata"]["labels"] = {"tier": "prod"}
    out = grid("apply", "-f", str(write(path, relabeled)), "--store", store)
    assert out.stdout.strip() == "gridnetwork.grid.praxis-proxy.io/grid-demo configured"
    got = json.loads(grid("get", "gn", "grid-demo", "-o", "json", "--store", store).stdout)
    assert (got["metadata"]["generation"], got["metadata"]["labels"]) == (1, {"tier": "prod"})
    respecced = network(region="eu-west-1")
    respecced["metadata"]["labels"] = {"tier": "prod"}
    grid("apply", "-f", str(write(path, respecced)), "--store", store)
    got = json.loads(
        grid("get", "gridnetworks", "grid-demo", "-o", "json", "--store", store).stdout
    )
    assert got["metadata"]["generation"] == 2
    assert got["spec"] == {"region": "eu-west-1"}
    # What the store holds is still a valid resource for the operator to read.
    assert parse_resource(got).name == "grid-demo"


def test_status_comes_from_the_operator_not_from_apply(store: str, tmp_path: Path) -> None:
    obj = network()
    obj["status"] = {"phase": "Active"}
    path = write(tmp_path / "net.yaml", obj)
    grid("apply", "-f", str(path), "--store", store)

    async def operator_writes_status() -> None:
        db = await SqliteStore.open(store.removeprefix("sqlite:"))
        try:
            await db.patch_status("GridNetwork", "grid-demo", {"phase": "Initializing"})
        finally:
            await db.close()

    asyncio.run(operator_writes_status())
    again = grid("apply", "-f", str(path), "--store", store)
    assert again.stdout.strip().endswith("unchanged")
    listed = grid("get", "gn", "--store", store).stdout.splitlines()
    assert listed[0].split() == ["NAME", "PHASE", "SITES", "REGION", "GATEWAYS", "AGE"]
    assert listed[1].split()[:2] == ["grid-demo", "Initializing"]


def test_get_accepts_kind_plural_and_short_names(store: str) -> None:
    grid("apply", "-f", str(QUICKSTART), "--store", store)
    for name in ("gridsites", "gridsite", "GridSite", "gs", "gridsites.grid.praxis-proxy.io"):
        table = grid("get", name, "--store", store)
        assert table.exit_code == 0, name
        rows = table.stdout.splitlines()
        assert rows[0].split() == ["NAME", "PHASE", "NETWORK", "REGION", "ZONE", "EGRESS", "AGE"]
        assert [r.split()[0] for r in rows[1:]] == ["central", "east", "west"]
    providers = grid("get", "ip", "--store", store).stdout
    assert "BACKEND" in providers and "vllm-east" in providers
    assert "grid-demo" in grid("get", "inferenceproviders", "--store", store).stdout
    listed = yaml.safe_load(grid("get", "gs", "-o", "yaml", "--store", store).stdout)
    assert listed["kind"] == "List"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["central", "east", "west"]
    selected = grid("get", "gs", "-l", "tier=staging", "--store", store).stdout.splitlines()
    assert [r.split()[0] for r in selected[1:]] == ["central"]


def test_secret_values_are_never_printed(store: str) -> None:
    grid("apply", "-f", str(QUICKSTART), "--store", store)
    secret_doc = yaml.safe_load((QUICKSTART / "30-secrets.yaml").read_text())
    values = list((secret_doc.get("stringData") or {}).values()) + list(
        (secret_doc.get("data") or {}).values()
    )
    values += [base64.b64encode(str(v).encode()).decode() for v in values]
    assert values
    outputs = [
        grid("get", "secrets", "-A", "--store", store).stdout,
        grid(
            "get",
            "secret",
            "openai-credentials",
            "-n",
            "grid-system",
            "-o",
            "yaml",
            "--store",
            store,
        ).stdout,
        grid("get", "secrets", "-n", "grid-system", "-o", "json", "--store", store).stdout,
    ]
    for output in outputs:
        assert "openai-credentials" in output
        for value in values:
            assert str(value) not in output
    shown = yaml.safe_load(outputs[1])
    assert set(shown["data"].values()) == {"<redacted>"}


def test_config_maps_are_namespaced(store: str, tmp_path: Path) -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "grid-overlay-grid-demo-edge", "namespace": "grid-system"},
        "data": {"grid-config.json": "{}"},
    }
    out = grid("apply", "-f", str(write(tmp_path / "cm.yaml", cm)), "--store", store)
    assert out.stdout.strip() == "configmap/grid-overlay-grid-demo-edge created"
    assert grid("get", "cm", "--store", store).stderr.startswith("No resources found")
    rows = grid("get", "configmaps", "-n", "grid-system", "--store", store).stdout.splitlines()
    assert rows[0].split() == ["NAMESPACE", "NAME", "DATA", "AGE"]
    assert rows[1].split()[:3] == ["grid-system", "grid-overlay-grid-demo-edge", "1"]


def test_delete_removes_and_missing_objects_exit_1(store: str) -> None:
    grid("apply", "-f", str(QUICKSTART), "--store", store)
    gone = grid("delete", "gs", "central", "--store", store)
    assert (gone.exit_code, gone.stdout.strip()) == (
        0,
        'gridsite.grid.praxis-proxy.io "central" deleted',
    )
    missing = grid("get", "gs", "central", "--store", store)
    assert missing.exit_code == 1
    assert 'gridsites.grid.praxis-proxy.io "central" not found' in missing.stderr
    assert grid("delete", "gs", "central", "--store", store).exit_code == 1


def test_bad_input_exits_2_with_one_line_per_problem_and_writes_nothing(
    tmp_path: Path, store: str
) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    shutil.copy(QUICKSTART / "00-network.yaml", bad / "00-network.yaml")
    shutil.copy(EXAMPLES / "bad" / "unknown-field.yaml", bad / "10-unknown-field.yaml")
    shutil.copy(EXAMPLES / "bad" / "wrong-type.yaml", bad / "20-wrong-type.yaml")
    result = grid("apply", "-f", str(bad), "--store", store)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2
    assert "10-unknown-field.yaml:" in lines[0] and "spec.swim.gosipNodes" in lines[0]
    assert "GridNetwork/grid-bad-unknown-field" in lines[0]
    assert "20-wrong-type.yaml:" in lines[1] and "spec.swim.gossipNodes" in lines[1]
    assert not Path(store.removeprefix("sqlite:")).exists()


@pytest.mark.parametrize(
    "name",
    ["missing-secret-key.yaml", "duplicate-name.yaml", "malformed-yaml.yaml", "unknown-kind.yaml"],
)
def test_each_bad_example_is_refused_with_exit_2(name: str, store: str) -> None:
    result = grid("apply", "-f", str(EXAMPLES / "bad" / name), "--store", store)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert all(line.count(": ") >= 3 for line in result.stderr.strip().splitlines())


def test_store_comes_from_grid_store_and_unknown_kinds_are_usage_errors(
    tmp_path: Path,
) -> None:
    env = {"GRID_STORE": f"sqlite:{tmp_path / 'env.db'}"}
    path = write(tmp_path / "net.yaml", network())
    assert grid("apply", "-f", str(path), env=env).exit_code == 0
    assert (tmp_path / "env.db").exists()
    assert "grid-demo" in grid("get", "gn", env=env).stdout
    assert grid("get", "pods", env=env).exit_code == 2
    assert grid("get", "gn", "--store", "postgres://x").exit_code == 2
    absent = {"KUBECONFIG": str(tmp_path / "absent-kubeconfig.yaml")}
    broken = grid("get", "gn", "--store", "kubernetes", env=absent)
    assert broken.exit_code == 1
    assert "cannot load Kubernetes configuration" in broken.output


def test_reading_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'absent.db'}"
    listed = grid("get", "gridsites", "--store", store)
    assert listed.exit_code == 0
    assert "No resources found" in listed.stderr
    assert grid("get", "gs", "east", "--store", store).exit_code == 1
    assert not (tmp_path / "absent.db").exists()


def test_agent_kinds_apply_get_and_delete(store: str) -> None:
    applied = grid("apply", "-f", str(QUICKSTART), "--store", store)
    assert applied.exit_code == 0, applied.output
    lines = applied.stdout.splitlines()
    assert "agenttoolprovider.grid.praxis-proxy.io/tools-east created" in lines
    assert "agenttoagentprovider.grid.praxis-proxy.io/planner-west created" in lines
    listed = grid("get", "atp", "--store", store)
    assert listed.exit_code == 0 and "tools-east" in listed.stdout
    assert "search,calculator" in listed.stdout
    shown = grid("get", "agenttoagentprovider", "planner-west", "-o", "json", "--store", store)
    assert json.loads(shown.stdout)["spec"]["agentCard"]["skills"] == ["plan-trip"]
    deleted = grid("delete", "agenttoolprovider", "tools-east", "--store", store)
    assert deleted.exit_code == 0, deleted.output
    assert grid("get", "atp", "tools-east", "--store", store).exit_code != 0
