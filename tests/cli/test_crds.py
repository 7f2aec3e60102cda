"""`grid crds`, `grid validate` and the shared exit-2 manifest loader."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from grid.cli import main
from grid.cli.resources_cmd import crds_command, load_or_exit, register
from grid.core.resources import KINDS
from grid.core.resources.crd_schema import crd_file_name, crd_yaml

REPO = Path(__file__).resolve().parents[2]
BAD = sorted((REPO / "examples" / "bad").glob("*.yaml"))


@pytest.fixture
def cli() -> click.Group:
    @click.group()
    def group() -> None:
        """A group holding only the resource commands."""

    register(group)
    return group


def test_crds_prints_every_kind_as_yaml() -> None:
    result = CliRunner().invoke(crds_command, [])
    assert result.exit_code == 0
    for kind in KINDS:
        assert f"  name: {KINDS[kind].crd_name}" in result.output
    assert result.output.count("kind: CustomResourceDefinition") == len(KINDS) == 5


def test_deploy_crds_match_the_generated_output() -> None:
    # deploy/crds/ is generated with `grid crds --out-dir deploy/crds`; it must not drift.
    for kind in KINDS:
        committed = (REPO / "deploy" / "crds" / crd_file_name(kind)).read_text()
        assert committed == crd_yaml(kind), f"regenerate deploy/crds for {kind}"
    stdout = CliRunner().invoke(crds_command, []).output
    assert stdout == "---\n" + "---\n".join(
        (REPO / "deploy" / "crds" / crd_file_name(k)).read_text() for k in KINDS
    )


def test_crds_out_dir_writes_one_file_per_kind(tmp_path: Path) -> None:
    result = CliRunner().invoke(crds_command, ["--out-dir", str(tmp_path / "crds")])
    assert result.exit_code == 0
    assert sorted(p.name for p in (tmp_path / "crds").iterdir()) == sorted(
        crd_file_name(k) for k in KINDS
    )


def test_crds_is_registered_on_the_main_group() -> None:
    result = CliRunner().invoke(main, ["crds"])
    assert result.exit_code == 0
    assert "openAPIV3Schema" in result.output


def test_validate_accepts_the_quickstart(cli: click.Group) -> None:
    result = CliRunner().invoke(cli, ["validate", "-f", str(REPO / "examples" / "quickstart")])
    assert result.exit_code == 0, result.output
    assert "1 GridNetwork, 3 GridSite, 6 InferenceProvider, 1 Secret" in result.output


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_validate_exits_2_with_one_line_per_problem(cli: click.Group, path: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", "-f", str(path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines
    for line in lines:
        assert line.startswith(f"{path}:")
    assert "Traceback" not in result.output
    assert "do-not-print" not in result.output


def test_load_or_exit_returns_manifests_or_exits_2(tmp_path: Path) -> None:
    manifests = load_or_exit(REPO / "examples" / "quickstart")
    assert "grid-demo" in manifests.networks

    @click.command()
    @click.argument("path")
    def show(path: str) -> None:
        load_or_exit(path)
        click.echo("loaded")

    missing = CliRunner().invoke(show, [str(tmp_path / "missing.yaml")])
    assert missing.exit_code == 2
    assert "no such file" in missing.stderr
    assert "loaded" not in missing.output
