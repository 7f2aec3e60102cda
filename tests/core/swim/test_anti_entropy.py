"""A push-pull reply leaves out what the request held: merging it is merging the full reply."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.swim.anti_entropy import reply_to
from grid.core.swim.config import SwimConfig
from grid.core.swim.machine import SwimMachine
from grid.core.swim.members import Member, MemberState
from grid.core.swim.messages import Alive, BroadcastItem, Dead, Lane, PushPull
from grid.core.wire.codec import encoded_size

NAMES = [f"p{i}" for i in range(1, 9)]
STATES = [MemberState.ALIVE, MemberState.SUSPECT, MemberState.DEAD]

record = st.none() | st.tuples(st.integers(0, 2), st.sampled_from(STATES))
tables = st.fixed_dictionaries({name: st.tuples(record, record) for name in NAMES})


def machine(node: str, table: dict[str, Member]) -> SwimMachine:
    built = SwimMachine(
        node, f"10.9.0.{1 if node == 'a' else 2}:7946", rng=random.Random(7),
        size_of=encoded_size, config=SwimConfig(),
    )  # fmt: skip
    built.restore(table)
    built.join((), 0.0)
    return built


Held = tuple[int, MemberState] | None
Rows = dict[str, tuple[Held, Held]]


def side(rows: Rows, which: int) -> dict[str, Member]:
    table = {}
    for index, (name, pair) in enumerate(rows.items(), start=1):
        held = pair[which]
        if held is not None:
            incarnation, state = held
            accuser = "" if state is MemberState.ALIVE else name
            table[name] = Member(name, f"10.0.0.{index}:7946", incarnation, state, accuser)
    return table


def view(m: SwimMachine) -> list[tuple[str, str, int, MemberState]]:
    return sorted((r.id, r.address, r.incarnation, r.state) for r in m.members())


@settings(max_examples=150, deadline=None)
@given(tables)
def test_merging_the_reply_equals_merging_the_full_state(rows: Rows) -> None:
    ours, theirs = side(rows, 0), side(rows, 1)
    requester, twin, responder = machine("a", ours), machine("a", ours), machine("b", theirs)
    full = machine("b", theirs).push_pull_message(join=False)
    request = requester.push_pull_message(join=False)
    reply, _ = responder.handle_push_pull(request, 1.0)
    assert len(reply.members) <= len(full.members)
    assert not set(reply.members) & set(request.members)
    requester.handle_push_pull_reply("10.9.0.2:7946", reply, 1.0)
    twin.handle_push_pull_reply("10.9.0.2:7946", full, 1.0)
    assert view(requester) == view(twin)
    assert requester.unproven_count == twin.unproven_count


def item(origin: str, lane: Lane, revision: int) -> BroadcastItem:
    return BroadcastItem(lane, origin, revision, f"{origin}/{lane}/{revision}".encode())


def test_items_go_only_where_the_request_is_older_or_lacks_them() -> None:
    ours = PushPull(
        "b",
        (Alive("b", "h:2", 0), Dead("x", "h:9", 1, "b")),
        (item("s1", Lane.STATE, 3), item("s1", Lane.CERT, 1), item("s2", Lane.STATE, 5)),
    )
    request = PushPull(
        "a",
        (Alive("a", "h:1", 0), Alive("b", "h:2", 0), Dead("x", "h:9", 0, "a")),
        (item("s1", Lane.STATE, 3), item("s2", Lane.STATE, 6)),
    )
    reply = reply_to(request, ours)
    assert reply.members == (Dead("x", "h:9", 1, "b"),)
    assert reply.items == (item("s1", Lane.CERT, 1),)
    # A joiner asked for everything.
    joining = PushPull("a", request.members, request.items, join=True)
    assert reply_to(joining, ours) == ours
