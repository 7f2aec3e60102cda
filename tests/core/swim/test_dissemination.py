"""The piggyback queue: retransmit counts, invalidation per member and per lane, budgets."""

from __future__ import annotations

import pytest

from grid.core.swim.config import SwimConfig
from grid.core.swim.dissemination import PART_OVERHEAD_BYTES, DisseminationQueue
from grid.core.swim.effects import ProbeTick, Schedule, Send
from grid.core.swim.messages import Alive, BroadcastItem, Lane, Ping, PushPull, Suspect
from grid.core.wire.codec import encoded_size

from .conftest import MachineFactory, answer_challenges


def item(lane: Lane, origin: str, revision: int, size: int = 10) -> BroadcastItem:
    return BroadcastItem(lane, origin, revision, bytes(size))


def drain(queue: DisseminationQueue, limit: int, budget: int = 1400) -> list[object]:
    sent: list[object] = []
    while len(queue):
        pick = queue.select(budget, limit)
        assert pick.updates or pick.items
        sent.extend(pick.updates)
        sent.extend(pick.items)
    return sent


@pytest.mark.parametrize("limit", [1, 4, 12])
def test_each_update_is_sent_exactly_limit_times(limit: int):
    queue = DisseminationQueue(1200)
    updates = [Alive(f"m{i}", "10.0.0.1:7946", 0) for i in range(5)]
    for update in updates:
        queue.enqueue_update(update, encoded_size(update))
    sent = drain(queue, limit)
    assert sorted(sent, key=repr) == sorted(updates * limit, key=repr)


def test_least_sent_goes_first_and_newest_among_equals():
    queue = DisseminationQueue(1200)
    first, second = Alive("a", "x:1", 0), Alive("b", "x:1", 0)
    size = encoded_size(first) + PART_OVERHEAD_BYTES
    queue.enqueue_update(first, encoded_size(first))
    assert queue.select(size, 8).updates == [first]
    queue.enqueue_update(second, encoded_size(second))
    assert queue.select(size, 8).updates == [second]  # never sent beats sent once
    third = Alive("c", "x:1", 0)
    queue.enqueue_update(third, encoded_size(third))
    queue.enqueue_update(Alive("d", "x:1", 0), encoded_size(third))
    assert queue.select(size, 8).updates == [Alive("d", "x:1", 0)]


def test_newer_gossip_about_a_member_replaces_the_queued_one():
    queue = DisseminationQueue(1200)
    queue.enqueue_update(Alive("m", "x:1", 0), 40)
    queue.select(1400, 8)
    suspect = Suspect("m", "x:1", 0, "z")
    queue.enqueue_update(suspect, 50)
    assert len(queue) == 1
    assert queue.transmits(("m", "m")) == 0  # the count restarts for the new news
    assert drain(queue, 2) == [suspect, suspect]


def test_lane_items_invalidate_within_origin_and_lane_only():
    queue = DisseminationQueue(1200)
    old_state = item(Lane.STATE, "a", 1)
    gateway = item(Lane.GATEWAY, "a", 1)
    other_origin = item(Lane.STATE, "b", 1)
    for entry in (old_state, gateway, other_origin):
        assert queue.enqueue_item(entry, encoded_size(entry))
    new_state = item(Lane.STATE, "a", 2)
    assert queue.enqueue_item(new_state, encoded_size(new_state))
    assert not queue.enqueue_item(old_state, encoded_size(old_state))  # older: refused
    assert len(queue) == 3
    assert set(drain(queue, 1)) == {new_state, gateway, other_origin}


def test_a_burst_in_one_lane_never_evicts_another_lane():
    queue = DisseminationQueue(1200)
    cert = item(Lane.CERT, "a", 1)
    queue.enqueue_item(cert, encoded_size(cert))
    for revision in range(1, 50):
        state = item(Lane.STATE, "a", revision)
        queue.enqueue_item(state, encoded_size(state))
    assert set(drain(queue, 1)) == {cert, item(Lane.STATE, "a", 49)}


def test_selection_respects_the_budget_and_skips_what_does_not_fit():
    queue = DisseminationQueue(1200)
    big = item(Lane.STATE, "a", 1, size=600)
    small = [Alive(f"m{i}", "x:1", 0) for i in range(3)]
    queue.enqueue_item(big, encoded_size(big))
    for update in small:
        queue.enqueue_update(update, encoded_size(update))
    budget = 3 * (encoded_size(small[0]) + PART_OVERHEAD_BYTES) + 10
    pick = queue.select(budget, 4)
    assert sorted(pick.updates, key=repr) == small and pick.items == []
    assert pick.used_bytes <= budget
    assert queue.select(1400, 4).items == [big]


def test_items_that_never_fit_are_left_to_push_pull(make_machine: MachineFactory):
    machine, _ = make_machine(peers=2)
    huge = BroadcastItem(Lane.CERT, "me", 1, bytes(2000))
    machine.publish(huge)
    assert machine.queued() == 1  # only our own Alive from joining
    assert huge in machine.push_pull_message(join=False).items


def datagram_size(message: Ping) -> int:
    base = encoded_size(Ping(message.seq, message.source, message.target))
    parts = (*message.updates, *message.items)
    return base + sum(encoded_size(part) + PART_OVERHEAD_BYTES for part in parts)


def test_datagrams_stay_within_the_plaintext_budget(make_machine: MachineFactory):
    machine, joined = make_machine(peers=1)
    news = tuple(Alive(f"member-{i:04d}", f"10.1.{i % 250}.9:7946", 0) for i in range(300))
    machine.handle_push_pull(PushPull("p1", news, (), False), 0.5)
    tick = next(e for e in joined if isinstance(e, Schedule) and isinstance(e.timer, ProbeTick))
    ping = next(e for e in machine.handle_timer(tick.timer, 1.0) if isinstance(e, Send)).message
    assert isinstance(ping, Ping)
    assert 0 < len(ping.updates) < 300
    assert datagram_size(ping) <= SwimConfig().datagram_budget_bytes


def test_machine_sends_each_update_retransmit_limit_times(make_machine: MachineFactory):
    machine, _ = make_machine(peers=20)
    news = Alive("newcomer", "10.9.9.9:7946", 0)
    heard = machine.handle_packet("10.0.0.1:7946", Ping(1, "p1", "me", updates=(news,)), 1.0)
    assert machine.member("newcomer") is None  # announced, not admitted
    outgoing = answer_challenges(machine, heard, 1.0)  # it answers at its address
    assert machine.member("newcomer") is not None
    for seq in range(2, 40):
        outgoing += machine.handle_packet("10.0.0.1:7946", Ping(seq, "p1", "me"), 1.0 + seq)
    carrying = [e for e in outgoing if isinstance(e, Send) and news in e.message.updates]
    limit = machine.config.retransmit_limit(machine.live_count + 1)
    assert limit == 4 * 2  # λ = 4, ⌈log10(22)⌉ = 2
    assert len(carrying) == limit
    assert machine.transmits_of("newcomer") is None


def test_sustained_churn_does_not_grow_the_queue_without_bound():
    queue = DisseminationQueue(1200)
    for round_ in range(2000):
        for member in ("flappy", "jumpy"):
            update = Alive(member, "x:1", round_)
            queue.enqueue_update(update, encoded_size(update))
        queue.select(60, 8)  # room for one part only: fresher news always wins
    assert len(queue) == 2
    assert queue.stacked <= 2 * len(queue) + 64 + 1
