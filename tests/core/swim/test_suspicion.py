"""Lifeguard's dynamic suspicion timeout and local health multiplier, in isolation."""

from __future__ import annotations

import math

import pytest

from grid.core.swim.config import SwimConfig
from grid.core.swim.health import LocalHealth
from grid.core.swim.suspicion import Suspicion, suspicion_timeout_s
from grid.errors import ValidationError


@pytest.mark.parametrize("confirmations", [0, 1, 2, 3, 5])
def test_timeout_follows_memberlists_formula(confirmations: int):
    low, high, k = 10.0, 60.0, 3
    expected = max(low, high - (high - low) * math.log(confirmations + 1) / math.log(k + 1))
    assert suspicion_timeout_s(confirmations, k, low, high) == pytest.approx(expected)


def test_timeout_starts_at_max_and_reaches_min_at_k():
    assert suspicion_timeout_s(0, 3, 10.0, 60.0) == 60.0
    assert suspicion_timeout_s(3, 3, 10.0, 60.0) == pytest.approx(10.0)
    assert suspicion_timeout_s(0, 0, 10.0, 60.0) == 10.0  # nobody could confirm


def test_confirmations_count_once_per_accuser_and_stop_at_k():
    suspicion = Suspicion("a", 0, k=2, min_s=10.0, max_s=60.0, started_at=100.0)
    assert suspicion.deadline == 160.0
    assert not suspicion.confirm("a")  # the original accuser is not a confirmation
    assert suspicion.confirm("b")
    after_one = suspicion.deadline
    assert after_one < 160.0
    assert not suspicion.confirm("b")
    assert suspicion.confirm("c")
    assert suspicion.deadline == pytest.approx(110.0)
    assert not suspicion.confirm("d")
    assert suspicion.deadline == pytest.approx(110.0)


def test_local_health_saturates_and_scales():
    health = LocalHealth(max_multiplier=8)
    health.apply(-1)
    assert health.score == 0
    health.apply(20)
    assert health.score == 7
    assert health.scale(5.0) == 40.0
    health.apply(-3)
    assert health.multiplier == 5


def test_config_defaults_come_from_the_spec():
    cfg = SwimConfig.from_spec()
    assert (cfg.gossip_nodes, cfg.probe_interval_s, cfg.suspicion_timeout_s) == (3, 5.0, 10.0)
    assert cfg.suspicion_max_s == 60.0
    assert cfg.datagram_budget_bytes == 1400
    assert [cfg.retransmit_limit(n) for n in (1, 9, 10, 99, 100, 1024)] == [4, 4, 8, 8, 12, 16]
    assert cfg.push_pull_interval(32) == 30.0
    assert cfg.push_pull_interval(64) == 60.0
    assert cfg.push_pull_interval(1024) == 180.0


@pytest.mark.parametrize(
    ("interval_s", "timeout_s"), [(5.0, 1.0), (2.0, 1.0), (1.0, 0.5), (0.5, 0.25), (0.1, 0.05)]
)
def test_probe_timeout_from_spec_fits_half_the_probe_interval(interval_s, timeout_s):
    cfg = SwimConfig.from_spec(probe_interval_s=interval_s, suspicion_timeout_s=10.0)
    assert cfg.probe_timeout_s == timeout_s
    assert cfg.probe_timeout_s <= cfg.probe_interval_s / 2


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("gossip_nodes", -1, "spec.swim.gossipNodes"),
        ("probe_interval_s", 0.0, "spec.swim.probeInterval"),
        ("suspicion_timeout_s", -1.0, "spec.swim.suspicionTimeout"),
        ("probe_timeout_s", 9.0, "probe_timeout_s"),
        ("datagram_budget_bytes", 64, "datagram_budget_bytes"),
    ],
)
def test_invalid_config_names_the_field(field: str, value: float, path: str):
    with pytest.raises(ValidationError) as caught:
        SwimConfig(**{field: value})
    assert caught.value.path == path
