"""Items too large for a datagram: prompt push-pull rounds, rate-limited, to members
not yet known to hold them."""

from __future__ import annotations

import random

from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import Effect, OversizeTick, PushPullRequest, Schedule, Send
from grid.core.swim.machine import SwimMachine
from grid.core.swim.members import Member, MemberState, MemberTable
from grid.core.swim.messages import BroadcastItem, Lane, PushPull
from grid.core.swim.oversize import OversizeRelay

from .conftest import MachineFactory

BIG = b"x" * 4000
SMALL = b"y" * 100


def _due(effects: list[Effect]) -> list[float]:
    return [e.at for e in effects if isinstance(e, Schedule) and isinstance(e.timer, OversizeTick)]


def _round(machine: SwimMachine, at: float) -> list[PushPullRequest]:
    out = machine.handle_timer(OversizeTick(1), at)
    return [e for e in out if isinstance(e, PushPullRequest)]


def test_an_oversize_item_is_exchanged_with_gossip_nodes_members_at_once(
    make_machine: MachineFactory,
) -> None:
    machine, _ = make_machine(peers=5)
    out = machine.publish(BroadcastItem(Lane.STATE, "me", 1, BIG), now=1.0)
    assert _due(out) == [1.0]
    sent = _round(machine, 1.0)
    assert len(sent) == 3 and len({e.address for e in sent}) == 3
    assert all(BroadcastItem(Lane.STATE, "me", 1, BIG) in e.message.items for e in sent)


def test_a_small_item_owes_no_round(make_machine: MachineFactory) -> None:
    machine, _ = make_machine(peers=5)
    out = machine.publish(BroadcastItem(Lane.STATE, "me", 1, SMALL), now=1.0)
    assert _due(out) == []


def test_rounds_are_an_interval_apart_however_often_the_lane_changes(
    make_machine: MachineFactory,
) -> None:
    machine, _ = make_machine(peers=20)  # n = 21: two rounds per item
    machine.publish(BroadcastItem(Lane.STATE, "me", 1, BIG), now=1.0)
    first = machine.handle_timer(OversizeTick(1), 1.0)
    assert len([e for e in first if isinstance(e, PushPullRequest)]) == 3
    assert _due(first) == [2.0]  # the second round, an interval after the first
    for revision in range(2, 6):
        assert _due(machine.publish(BroadcastItem(Lane.STATE, "me", revision, BIG), now=1.1)) == []
    second = _round(machine, 2.0)
    assert len(second) == 3
    assert all(BroadcastItem(Lane.STATE, "me", 5, BIG) in e.message.items for e in second)


def test_members_that_carried_the_item_are_not_asked_again(make_machine: MachineFactory) -> None:
    machine, _ = make_machine(peers=3)
    item = BroadcastItem(Lane.STATE, "p1", 7, BIG)
    request = PushPull("p1", (), (item,), False)
    _, out = machine.handle_push_pull(request, 1.0)
    assert _due(out) == [1.0]
    partners = {e.address for e in _round(machine, 1.0)}
    assert partners == {"10.0.0.2:7946", "10.0.0.3:7946"}  # not p1, which sent it


def _table(*ids: str) -> MemberTable:
    table = MemberTable()
    for i, member_id in enumerate(ids, start=1):
        table.put(Member(member_id, f"10.0.1.{i}:7946", 0, MemberState.ALIVE), random.Random(i))
    return table


def test_once_every_live_member_holds_it_nothing_more_is_owed() -> None:
    relay = OversizeRelay(1.0)
    relay.owe(BroadcastItem(Lane.STATE, "me", 1, BIG), rounds=3)
    assert relay.arm(0.0) == 0.0
    partners = relay.round(0.0, _table("a", "b"), random.Random(1), fanout=3)
    assert {m.id for m in partners} == {"a", "b"}
    assert not relay and relay.arm(5.0) is None


def test_rounds_run_out_even_if_some_member_was_never_reached() -> None:
    relay = OversizeRelay(1.0)
    relay.owe(BroadcastItem(Lane.STATE, "me", 1, BIG), rounds=2)
    table = _table("a", "b", "c", "d")
    relay.arm(0.0)
    first = relay.round(0.0, table, random.Random(1), fanout=1)
    assert relay.arm(0.2) == 1.0
    second = relay.round(1.0, table, random.Random(2), fanout=1)
    assert first != second  # a holder is not asked again
    assert not relay  # the periodic push-pull repairs what is left


def test_an_interval_of_zero_leaves_oversize_items_to_the_periodic_push_pull(
    make_machine: MachineFactory,
) -> None:
    machine, _ = make_machine(peers=5, config=SwimConfig(oversize_push_pull_interval_s=0))
    out = machine.publish(BroadcastItem(Lane.STATE, "me", 1, BIG), now=1.0)
    assert _due(out) == [] and not [e for e in out if isinstance(e, Send)]
