"""Gateway configuration: file values, flag overrides and named errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from grid.errors import ValidationError
from grid.telemetry.config import build_config, read_config_file

BASE = {"cert": "c.pem", "key": "k.pem", "client_ca": "ca.pem"}


def test_flags_override_the_file_and_defaults_fill_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text("listen: 0.0.0.0:9000\nrate_per_agent_rps: 5\nburst_per_agent: 7\n")
    config = build_config(
        {**read_config_file(path), **BASE}, {"listen": "127.0.0.1:0", "burst_per_agent": None}
    )
    assert config.settings.listen == "127.0.0.1:0"
    assert (config.settings.rate_per_agent_rps, config.settings.burst_per_agent) == (5, 7)
    assert config.settings.event_batch_records_max == 1000 and config.backbone == "sqlite"


def test_toml_files_are_read_too(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text('backbone = "nats://127.0.0.1:4222"\npublish_budget_s = 1.5\n')
    config = build_config({**read_config_file(path), **BASE}, {})
    assert config.backbone == "nats://127.0.0.1:4222" and config.settings.publish_budget_s == 1.5


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"typo_key": 1}, "typo_key"),
        ({"request_body_bytes_max": 0}, "request_body_bytes_max"),
        ({}, "cert"),
    ],
)
def test_errors_name_the_offending_key(values: dict[str, object], named: str) -> None:
    base = {} if named == "cert" else BASE
    with pytest.raises(ValidationError, match=named):
        build_config({**base, **values}, {})


@pytest.mark.parametrize("listen", ["8443", "host:99999", "::1:80"])
def test_listen_must_be_host_port(listen: str) -> None:
    with pytest.raises(ValidationError, match="listen"):
        build_config(BASE, {"listen": listen})


def test_backbone_must_be_sqlite_or_a_nats_url() -> None:
    with pytest.raises(ValidationError, match="backbone"):
        build_config(BASE, {"backbone": "kafka://x:1"})
