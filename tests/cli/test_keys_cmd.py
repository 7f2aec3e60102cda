"""`grid keys create`: the key is printed once and only its digest is written."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from grid.cli import main
from grid.core.identity import parse_keys


def test_create_prints_the_key_and_appends_its_hash_line(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    first = CliRunner().invoke(main, ["keys", "create", "--tenant", "acme", "--file", str(keys)])
    second = CliRunner().invoke(main, ["keys", "create", "--tenant", "acme", "--file", str(keys)])
    assert first.exit_code == second.exit_code == 0
    key_a, key_b = first.stdout.strip(), second.stdout.strip()
    assert key_a != key_b and key_a not in keys.read_text()
    parsed = parse_keys(yaml.safe_load(keys.read_text()))
    assert parsed.tenant(key_a) == parsed.tenant(key_b) == "acme"
    assert parsed.tenant("grid-wrong") is None
    assert keys.stat().st_mode & 0o777 == 0o600


def test_a_file_that_is_not_a_keys_file_is_left_alone(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("not: a list\n")
    result = CliRunner().invoke(main, ["keys", "create", "--tenant", "acme", "--file", str(keys)])
    assert result.exit_code == 1 and "nothing written" in result.output
    assert keys.read_text() == "not: a list\n"
