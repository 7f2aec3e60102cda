"""`grid operator` flags: one per `OperatorSettings` field, each with its GRID_* fallback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from grid.cli import main, operator_cmd
from grid.operator.settings import OperatorSettings, env_name, flag_name

DOC = Path(__file__).resolve().parents[2] / "docs" / "operator.md"


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[OperatorSettings]:
    """The settings each invocation would serve with; nothing is started.

    Log set-up is skipped too: it would replace the test process's root handlers.
    """
    seen: list[OperatorSettings] = []

    async def serve(settings: OperatorSettings) -> None:
        seen.append(settings)

    monkeypatch.setattr(operator_cmd, "_serve", serve)
    monkeypatch.setattr(operator_cmd.logs, "configure", lambda level: None)
    return seen


def test_flag_and_environment_names_follow_the_field() -> None:
    assert flag_name("render_interval_s") == "--render-interval"
    assert env_name("render_interval_s") == "GRID_RENDER_INTERVAL"
    assert (flag_name("swim_key_file"), env_name("swim_key_file")) == (
        "--swim-key-file",
        "GRID_SWIM_KEY_FILE",
    )


def test_help_and_docs_cover_every_setting_with_its_environment_fallback(
    served: list[OperatorSettings],
) -> None:
    result = CliRunner().invoke(main, ["operator", "--help"], terminal_width=200)
    assert result.exit_code == 0
    doc = DOC.read_text(encoding="utf-8")
    for name, field in OperatorSettings.model_fields.items():
        assert flag_name(name) in result.output and env_name(name) in result.output, name
        assert field.description and field.description.split()[0] in result.output, name
        assert f"| `{flag_name(name)}" in doc and f"| `{env_name(name)}` |" in doc, name


def test_a_flag_wins_over_the_environment_which_wins_over_the_default(
    served: list[OperatorSettings], tmp_path: Path
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("pem")
    env = {"GRID_SITE": "east", "GRID_RENDER_INTERVAL": "0.5", "GRID_CA": str(ca)}
    args = ["operator", "--render-interval", "2", "--overlay-dir", str(tmp_path)]
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    [settings] = served
    assert settings == OperatorSettings(
        site="east", render_interval_s=2.0, ca=ca, overlay_dir=tmp_path
    )
    assert CliRunner().invoke(main, ["operator"], env=env).exit_code == 0
    assert served[1].render_interval_s == 0.5 and served[1].record_refresh_s == 5.0


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--site", "east", "--render-interval", "0.01"],
        ["--site", "east", "--shutdown-timeout", "-1"],
        ["--site", "east", "--cert", "/nonexistent/cert.pem"],
        ["--site", "east", "--record-refresh", "soon"],
    ],
)
def test_bad_flags_are_usage_errors(served: list[OperatorSettings], args: list[str]) -> None:
    result = CliRunner().invoke(main, ["operator", *args], env={"GRID_SITE": None})
    assert result.exit_code == 2, result.output
    assert served == []
