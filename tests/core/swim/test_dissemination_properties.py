"""Property tests of the piggyback queue against a simple model."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.swim.dissemination import PART_OVERHEAD_BYTES, DisseminationQueue
from grid.core.swim.messages import Alive, BroadcastItem, Lane, Suspect
from grid.core.wire.codec import encoded_size

MEMBERS = ["a", "b", "c"]
ORIGINS = ["x", "y"]

update_op = st.tuples(st.just("update"), st.sampled_from(MEMBERS), st.integers(0, 5), st.booleans())
item_op = st.tuples(
    st.just("item"),
    st.sampled_from(ORIGINS),
    st.sampled_from(list(Lane)),
    st.integers(1, 6),
    st.integers(0, 700),
)
select_op = st.tuples(st.just("select"), st.integers(0, 1400))
operations = st.lists(st.one_of(update_op, item_op, select_op), max_size=60)


def part_size(value: object) -> int:
    return encoded_size(value) + PART_OVERHEAD_BYTES  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(operations, st.integers(1, 5))
def test_queue_sends_only_latest_news_within_budget_exactly_limit_times(ops, limit):
    queue = DisseminationQueue(1200)
    latest: dict[tuple[str, ...], object] = {}
    sent: Counter[object] = Counter()
    for op in ops:
        if op[0] == "update":
            _, member, incarnation, suspect = op
            update = (
                Suspect(member, "h:1", incarnation, "z")
                if suspect
                else Alive(member, "h:1", incarnation)
            )
            if queue.enqueue_update(update, encoded_size(update)):
                latest[("m", member)] = update
                sent[update] = 0
        elif op[0] == "item":
            _, origin, lane, revision, size = op
            item = BroadcastItem(lane, origin, revision, bytes(size))
            key = ("i", origin, lane.value)
            current = latest.get(key) if queue.transmits(key) is not None else None
            accepted = queue.enqueue_item(item, encoded_size(item))
            if isinstance(current, BroadcastItem) and current.revision >= revision:
                assert not accepted  # a queued newer revision of its lane wins
            elif accepted:
                latest[key] = item
                sent[item] = 0
            else:
                assert part_size(item) > 1200  # too large: left to push-pull
                latest.pop(key, None)
        else:
            pick = queue.select(op[1], limit)
            parts = [*pick.updates, *pick.items]
            assert pick.used_bytes == sum(part_size(p) for p in parts) <= op[1]
            assert len(set(parts)) == len(parts)
            for part in parts:
                assert part in latest.values(), "an invalidated entry was sent"
                sent[part] += 1
                assert sent[part] <= limit
    while len(queue):
        pick = queue.select(1400, limit)
        for part in (*pick.updates, *pick.items):
            assert part in latest.values()
            sent[part] += 1
    for value in latest.values():
        assert sent[value] == limit
