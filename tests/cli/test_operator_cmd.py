"""`grid operator` flags: one per `OperatorSettings` field, each with its GRID_* fallback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from grid.cli import main, operator_cmd
from grid.operator.settings import UPSTREAM_ENV, OperatorSettings, env_name, env_only, flag_name

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
        for variable in UPSTREAM_ENV.get(name, ()):
            assert f"`{variable}`" in doc, variable
        if env_only(name):
            assert flag_name(name) not in result.output, name
            continue
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


KEY = bytes(range(32))
UPSTREAM = {
    "GRID_SWIM_SITE_NAME": "east",
    "GRID_SWIM_BIND_ADDR": "127.0.0.1:7946",
    "GRID_SWIM_ADVERTISE_ADDR": "10.0.0.5:7946",
    "GRID_SWIM_SEEDS": "10.0.0.6:7946, 10.0.0.7:7946",
    "GRID_SWIM_ENCRYPT_KEY": KEY.hex(),
    "GRID_METRICS_ADDR": "127.0.0.1:9191",
    "GRID_SWIM_DEAD_MEMBER_TTL_SECS": "300",
}


def test_upstream_variables_alone_configure_the_operator(
    served: list[OperatorSettings],
) -> None:
    result = CliRunner().invoke(main, ["operator"], env=UPSTREAM | {"GRID_SITE": None})
    assert result.exit_code == 0, result.output
    [settings] = served
    assert (settings.site, settings.swim_bind, settings.swim_advertise) == (
        "east",
        "127.0.0.1:7946",
        "10.0.0.5:7946",
    )
    assert settings.swim_seeds == ["10.0.0.6:7946", "10.0.0.7:7946"]
    assert settings.metrics_bind == "127.0.0.1:9191"
    assert settings.swim_dead_retention_s == 300.0
    assert settings.swim_encrypt_key is not None
    assert settings.swim_encrypt_key.get_secret_value() == KEY
    assert KEY.hex() not in repr(settings) and KEY.hex() not in result.output


def test_grid_site_name_is_read_too_and_upstream_spelling_wins_over_it(
    served: list[OperatorSettings],
) -> None:
    env = {"GRID_SITE": None, "GRID_SWIM_SITE_NAME": None, "GRID_SITE_NAME": "west"}
    assert CliRunner().invoke(main, ["operator"], env=env).exit_code == 0
    env["GRID_SWIM_SITE_NAME"] = "east"
    assert CliRunner().invoke(main, ["operator"], env=env).exit_code == 0
    assert [s.site for s in served] == ["west", "east"]


def test_a_flag_wins_over_grid_names_which_win_over_upstream_aliases(
    served: list[OperatorSettings],
) -> None:
    env = UPSTREAM | {"GRID_SITE": "central", "GRID_SWIM_BIND": "127.0.0.1:8000"}
    args = ["operator", "--metrics-bind", "127.0.0.1:9300", "--swim-seeds", "10.0.0.9:1"]
    assert CliRunner().invoke(main, args, env=env).exit_code == 0
    [settings] = served
    assert settings.site == "central" and settings.swim_bind == "127.0.0.1:8000"
    assert settings.metrics_bind == "127.0.0.1:9300" and settings.swim_seeds == ["10.0.0.9:1"]
    assert settings.swim_advertise == "10.0.0.5:7946"


@pytest.mark.parametrize("value", ["abc", "zz" * 32, KEY.hex()[:-2]])
def test_a_malformed_hex_key_is_a_usage_error_that_never_echoes_it(
    served: list[OperatorSettings], value: str
) -> None:
    env = {"GRID_SITE": "east", "GRID_SWIM_ENCRYPT_KEY": value}
    result = CliRunner().invoke(main, ["operator"], env=env)
    assert result.exit_code == 2 and served == []
    assert "GRID_SWIM_ENCRYPT_KEY must be 64 hexadecimal digits" in result.output
    assert value not in result.output


def test_a_seed_that_is_no_address_is_refused(served: list[OperatorSettings]) -> None:
    env = {"GRID_SITE": "east", "GRID_SWIM_SEEDS": "10.0.0.6:7946,nowhere"}
    result = CliRunner().invoke(main, ["operator"], env=env)
    assert result.exit_code == 2 and "nowhere" in result.output and served == []
