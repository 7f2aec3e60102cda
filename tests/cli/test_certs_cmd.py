"""`grid certs init` writes a usable dev PKI and prints fingerprints, never keys."""

from __future__ import annotations

import stat
from pathlib import Path

from click.testing import CliRunner

from grid.cli.certs_cmd import certs
from grid.core.trust import fingerprint_pem


def test_init_writes_the_pki_and_prints_each_fingerprint(tmp_path: Path) -> None:
    out = tmp_path / "pki"
    result = CliRunner().invoke(
        certs, ["init", str(out), "--sites", "east,west", "--trust-domain", "demo.grid"]
    )
    assert result.exit_code == 0, result.output
    for name in ("ca.pem", "swim.key", "east.pem", "east-key.pem", "west.pem", "west-key.pem"):
        assert (out / name).is_file()
    assert stat.S_IMODE((out / "east-key.pem").stat().st_mode) == 0o600
    assert len((out / "swim.key").read_bytes()) == 32
    for site in ("east", "west"):
        fingerprint = fingerprint_pem((out / f"{site}.pem").read_bytes())
        assert f"fingerprint  {fingerprint}" in result.output
        assert f"spiffe://demo.grid/site/{site}" in result.output
    assert "PRIVATE KEY" not in result.output
    key_body = (out / "east-key.pem").read_text().splitlines()[1]
    assert key_body not in result.output


def test_an_existing_pki_is_kept_unless_forced(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(certs, ["init", str(tmp_path), "--sites", "a"]).exit_code == 0
    before = (tmp_path / "ca.pem").read_bytes()
    again = runner.invoke(certs, ["init", str(tmp_path), "--sites", "a"])
    assert again.exit_code == 1
    assert "--force" in again.output
    assert (tmp_path / "ca.pem").read_bytes() == before
    forced = runner.invoke(certs, ["init", str(tmp_path), "--sites", "a", "--force"])
    assert forced.exit_code == 0
    assert (tmp_path / "ca.pem").read_bytes() != before


def test_bad_site_lists_are_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    for sites in ("", "East", "a,a", "a b"):
        result = runner.invoke(certs, ["init", str(tmp_path / "x"), "--sites", sites])
        assert result.exit_code == 2, sites
    assert not (tmp_path / "x").exists()
