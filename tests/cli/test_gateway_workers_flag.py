"""``grid gateway --workers``: bad values are usage errors naming the flag; the default count."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from grid.cli import main
from grid.gateway.workers import connection_shares, usable_cores, worker_count


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_a_bad_worker_count_is_a_usage_error_naming_the_flag(tmp_path: Path, value: str) -> None:
    config = tmp_path / "praxis.yaml"
    config.write_text("{}\n")
    args = ["gateway", "--config", str(config), "--workers", value]
    result = CliRunner().invoke(main, args, prog_name="grid")
    assert result.exit_code == 2, result.output
    assert "Usage: grid gateway" in result.output
    assert "'--workers'" in result.output
    assert "Traceback" not in result.output


def test_the_flag_is_in_the_help() -> None:
    result = CliRunner().invoke(main, ["gateway", "--help"])
    assert result.exit_code == 0
    assert "--workers" in result.output and "SO_REUSEPORT" in result.output


def test_the_default_is_the_usable_cores_capped_at_the_connection_budget() -> None:
    assert worker_count(None, 1024) == min(usable_cores(), 1024)
    assert worker_count(None, 1) == 1
    assert worker_count(8, 3) == 3
    assert worker_count(2, 1024) == 2


def test_the_connection_cap_is_divided_with_a_slot_for_every_worker() -> None:
    assert connection_shares(1024, 2) == [512, 512]
    assert connection_shares(10, 3) == [4, 3, 3]
    assert connection_shares(3, 3) == [1, 1, 1]
    for budget, workers in ((1024, 7), (17, 16), (5, 5)):
        shares = connection_shares(budget, workers)
        assert sum(shares) == budget and min(shares) >= 1
