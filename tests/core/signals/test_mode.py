"""Seed 000's mode lifecycle rules as pure decisions, one test per rule."""

from grid.core.signals.mode import Running, judge, rotates
from grid.core.trust import TrustPolicy

EAST, WEST, NORTH = "e" * 64, "a" * 64, "b" * 64
TRUST = TrustPolicy.pin(EAST, [WEST])
MORE_TRUST = TrustPolicy.pin(EAST, [WEST, NORTH])


def test_same_mode_and_trust_keeps_running() -> None:
    assert judge(Running("net", "poll", TRUST), "poll", TRUST) is None
    assert judge(Running("net", "gossip"), "gossip", TRUST) is None


def test_declared_mode_differing_from_the_running_one_exits_naming_both() -> None:
    line = judge(Running("net", "gossip"), "poll", TRUST)
    assert line is not None and "poll" in line and "gossip" in line and "'net'" in line
    assert judge(Running("net", "poll", TRUST), "gossip", TRUST) is not None


def test_peer_trust_change_restarts_under_poll() -> None:
    line = judge(Running("net", "poll", TRUST), "poll", MORE_TRUST)
    assert line is not None and "trust" in line


def test_peer_trust_change_does_not_restart_under_gossip() -> None:
    assert judge(Running("net", "gossip"), "gossip", MORE_TRUST) is None


def test_rotation_reads_declared_trust_spiffe_rotates_pin_does_not() -> None:
    assert rotates("spiffe")
    assert not rotates("pin")
