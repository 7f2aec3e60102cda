"""Roster replay and the admission decision of seed 004 step 2."""

from __future__ import annotations

import pytest

from grid.core.telemetry.refusals import AgentNotAdmitted, AgentNotRegistered
from grid.core.telemetry.roster import Roster, RosterRecord
from grid.errors import AlreadyExists, NotFound, TransitionError, ValidationError


def _log(*entries: tuple[str, str | None, str]) -> list[RosterRecord]:
    return [RosterRecord(a, t, s, i + 1) for i, (a, t, s) in enumerate(entries)]  # type: ignore[arg-type]


def test_unknown_agent_is_not_registered() -> None:
    with pytest.raises(AgentNotRegistered):
        Roster().admit("a1")


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        (["registered"], "registered"),
        (["registered", "admitted", "suspended"], "suspended"),
        (["registered", "admitted", "revoked"], "revoked"),
    ],
)
def test_registered_suspended_and_revoked_agents_are_not_admitted(
    states: list[str], expected: str
) -> None:
    roster = Roster()
    roster.replay(_log(*[("a1", "t1", s) for s in states]))
    with pytest.raises(AgentNotAdmitted, match=expected):
        roster.admit("a1")


def test_admitted_agent_gets_the_tenant_bound_at_registration() -> None:
    roster = Roster()
    roster.replay(_log(("a1", "t1", "registered"), ("a1", None, "admitted")))
    assert roster.admit("a1") == "t1"


def test_suspended_agent_can_be_readmitted() -> None:
    roster = Roster()
    roster.replay(
        _log(("a1", "t1", "registered"), ("a1", "t1", "admitted"), ("a1", "t1", "suspended"))
    )
    roster.apply(RosterRecord("a1", "t1", "admitted", 4))
    assert roster.admit("a1") == "t1"


def test_revoked_is_terminal_and_illegal_entries_are_skipped_deterministically() -> None:
    roster = Roster()
    log = _log(
        ("a1", "t1", "registered"),
        ("a1", "t1", "revoked"),
        ("a1", "t1", "admitted"),  # illegal after revoked
        ("a2", None, "registered"),  # registration without tenant
        ("a3", "t3", "admitted"),  # not registered first
    )
    roster.replay(reversed(log))  # replay orders by revision
    assert roster.get("a1").state == "revoked"  # type: ignore[union-attr]
    assert roster.get("a2") is None and roster.get("a3") is None
    assert roster.skipped == 3 and roster.revision == 5


def test_tenant_never_changes() -> None:
    roster = Roster()
    roster.replay(_log(("a1", "t1", "registered"), ("a1", "t2", "admitted")))
    assert roster.get("a1").state == "registered"  # type: ignore[union-attr]


def test_stale_revisions_are_ignored_when_tail_overlaps_replay() -> None:
    roster = Roster()
    roster.replay(_log(("a1", "t1", "registered"), ("a1", "t1", "admitted")))
    assert roster.apply(RosterRecord("a1", "t1", "suspended", 2)) is False
    assert roster.admit("a1") == "t1"


def test_plan_validates_operator_commands() -> None:
    roster = Roster()
    with pytest.raises(ValidationError):
        roster.plan("a1", "registered", None)
    assert roster.plan("a1", "registered", "t1") == ("registered", "t1")
    with pytest.raises(NotFound):
        roster.plan("a1", "admitted")
    roster.apply(RosterRecord("a1", "t1", "registered", 1))
    with pytest.raises(AlreadyExists):
        roster.plan("a1", "registered", "t1")
    assert roster.plan("a1", "admitted") == ("admitted", "t1")
    roster.apply(RosterRecord("a1", "t1", "revoked", 2))
    with pytest.raises(TransitionError):
        roster.plan("a1", "admitted")
