"""Every command's usage errors name the flag or argument, exit 2, and never dump a validator.

The cases are generated from the command tree itself, so a command or required
option added later is covered without editing this file.
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from grid.cli import main

Leaf = tuple[tuple[str, ...], click.Command]


def _leaves(group: click.Group, path: tuple[str, ...] = ()) -> list[Leaf]:
    found: list[Leaf] = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += _leaves(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


REQUIRED = [
    pytest.param(path, param.name, id=f"{' '.join(path)}:{param.name}")
    for path, command in _leaves(main)
    for param in command.params
    if param.required
]


def _value(param: click.Parameter, tmp_path: Path) -> str:
    """A valid value for a parameter, so that only the omitted one is refused."""
    kind = param.type
    if isinstance(kind, click.Path):
        if not kind.file_okay:
            target = tmp_path / f"dir-{param.name}"
            target.mkdir(exist_ok=True)
            return str(target)
        target = tmp_path / f"file-{param.name}"
        target.write_text("{}\n", encoding="utf-8")
        return str(target)
    if isinstance(kind, click.Choice):
        return str(kind.choices[0])
    if isinstance(kind, click.types.IntParamType | click.types.FloatParamType):
        return "1"
    if param.name == "kind_name":
        return "GridSite"
    return "east"


def _arguments(command: click.Command, omitted: str, tmp_path: Path) -> list[str]:
    args: list[str] = []
    for param in command.params:
        if not param.required or param.name == omitted:
            continue
        if isinstance(param, click.Option):
            args += [param.opts[-1], _value(param, tmp_path)]
    for param in command.params:
        if isinstance(param, click.Argument) and param.required and param.name != omitted:
            args.append(_value(param, tmp_path))
        elif isinstance(param, click.Argument) and param.name == omitted:
            break  # a later argument would fill the omitted one's place
    return args


def _clean_environment(command: click.Command) -> dict[str, str | None]:
    """Unset every environment fallback, so that only the command line counts."""
    names: dict[str, str | None] = {}
    for param in command.params:
        envvar = getattr(param, "envvar", None)
        for name in [envvar] if isinstance(envvar, str) else list(envvar or ()):
            names[name] = None
    return names


def _mentions(param: click.Parameter, output: str) -> bool:
    if isinstance(param, click.Argument):
        return f"Missing argument '{param.human_readable_name}" in output
    return "Missing option" in output and any(f"'{opt}'" in output for opt in param.opts)


@pytest.mark.parametrize(("path", "omitted"), REQUIRED)
def test_a_missing_required_parameter_is_named_with_exit_2(
    path: tuple[str, ...], omitted: str, tmp_path: Path
) -> None:
    command = dict(_leaves(main))[path]
    param = next(p for p in command.params if p.name == omitted)
    args = [*path, *_arguments(command, omitted, tmp_path)]
    result = CliRunner(env=_clean_environment(command)).invoke(main, args)
    assert result.exit_code == 2, (args, result.output)
    assert "Missing" in result.stderr, result.stderr
    assert _mentions(param, result.stderr), result.stderr
    assert "pydantic" not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("flag", ["--cert", "--key", "--client-ca"])
def test_telemetry_gateway_names_a_missing_certificate_flag(flag: str, tmp_path: Path) -> None:
    given = {"--cert": "c.pem", "--key": "k.pem", "--client-ca": "ca.pem"}
    args = [part for name, value in given.items() if name != flag for part in (name, value)]
    result = CliRunner().invoke(main, ["telemetry-gateway", *args])
    assert result.exit_code == 2
    assert f"Missing option '{flag}'" in result.stderr
    assert "pydantic" not in result.output


def test_operator_names_the_refused_flag_not_the_validator() -> None:
    result = CliRunner().invoke(main, ["operator", "--site", "east", "--swim-seeds", "no-port"])
    assert result.exit_code == 2
    assert "Invalid value for '--swim-seeds': seed 'no-port'" in result.stderr, result.stderr
    assert "pydantic" not in result.output and "validation error" not in result.output


@pytest.mark.parametrize("site", ["", "East", "east_1", "-east", "east.", "a" * 254])
def test_operator_refuses_a_site_that_is_no_object_name(site: str) -> None:
    result = CliRunner().invoke(main, ["operator", "--site", site])
    assert result.exit_code == 2
    assert "Invalid value for '--site': must be a Kubernetes object name" in result.stderr
    assert "pydantic" not in result.output and "validation error" not in result.output


@pytest.mark.parametrize("operator", ["operator", "operator:", ":8443", "operator:99999", "a:b"])
def test_gateway_refuses_an_operator_that_is_no_address(operator: str, tmp_path: Path) -> None:
    pems = {flag: str(tmp_path / f"{flag[2:]}.pem") for flag in ("--cert", "--key", "--ca")}
    args = ["gateway", "--config", str(tmp_path / "praxis.yaml"), "--operator", operator]
    result = CliRunner().invoke(main, [*args, *(p for f, v in pems.items() for p in (f, v))])
    assert result.exit_code == 2
    assert "--operator must be HOST:PORT" in result.stderr
