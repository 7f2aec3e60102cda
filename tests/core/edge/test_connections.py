"""The one connection ledger: its caps, classes and both eviction rules."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.core.edge.connections import BookCaps, ConnectionBook, Eviction, Refusal


def test_a_full_book_refuses_and_counts_the_refusal() -> None:
    book = ConnectionBook(BookCaps(connections_max=2))
    assert book.accept("a", "s", 0.0) is None
    assert book.accept("b", "s", 0.0) is None
    assert book.accept("c", "s", 9.0) is Refusal.FULL
    assert (book.total, book.refused, book.evicted) == (2, 1, 0)


def test_oldest_unsettled_is_evicted_once_old_enough() -> None:
    caps = BookCaps(connections_max=2, eviction=Eviction.OLDEST_UNSETTLED, evictable_after_s=1.0)
    book = ConnectionBook(caps)
    book.accept("slow", "s", 0.0)
    book.accept("probe", "s", 0.5)
    book.classify("probe", "")
    book.settle("probe")
    assert book.accept("early", "s", 0.9) is Refusal.FULL  # nobody old enough
    assert book.accept("late", "s", 1.2) is None
    assert book.take_evicted() == ["slow"]
    assert book.accept("next", "s", 5.0) is None
    assert book.take_evicted() == ["late"]  # the settled probe is never evicted
    assert book.evicted == 2


def test_a_classified_connection_without_a_head_is_still_evictable() -> None:
    caps = BookCaps(connections_max=1, eviction=Eviction.OLDEST_UNSETTLED, evictable_after_s=0.0)
    book = ConnectionBook(caps)
    book.accept("silent", "s", 0.0)
    assert book.classify("silent", "") == ""
    assert book.accept("new", "s", 0.0) is None
    assert book.take_evicted() == ["silent"]
    book.release("silent")  # its close arrives later: nothing changes
    assert (book.total, book.classified, book.pending) == (1, 0, 1)


def test_class_caps_and_unauthorized() -> None:
    book = ConnectionBook(BookCaps(connections_max=4, class_caps={"peer": 1}))
    for key in "abc":
        book.accept(key, "s", 0.0)
    assert book.classify("a", "peer") == "peer"
    assert book.classify("b", "peer") is Refusal.CLASS_FULL
    assert book.classify("c", None) is Refusal.UNAUTHORIZED
    assert (book.total, book.held("peer"), book.refused) == (1, 1, 2)


def test_misuse_is_an_error() -> None:
    book = ConnectionBook(BookCaps(connections_max=2))
    with pytest.raises(RuntimeError):
        book.classify("never", "")
    book.accept("a", "s", 0.0)
    with pytest.raises(RuntimeError):
        book.accept("a", "s", 0.0)
    with pytest.raises(ValueError):
        BookCaps(connections_max=2, handshakes_max=3)


_EVENT = st.tuples(st.sampled_from(["accept", "classify", "settle", "release"]), st.integers(0, 40))


@given(
    st.lists(_EVENT, max_size=300),
    st.sampled_from(list(Eviction)),
    st.integers(1, 6),
    st.integers(1, 6),
)
def test_caps_and_counts_hold_under_any_events(
    events: list[tuple[str, int]], eviction: Eviction, total: int, pending_cap: int
) -> None:
    caps = BookCaps(
        connections_max=total + 1,
        classified_max=total,
        handshakes_max=min(pending_cap, total + 1),
        class_caps={"peer": max(1, total // 2)},
        eviction=eviction,
        evictable_after_s=2.0,
    )
    book = ConnectionBook(caps)
    state: dict[int, str] = {}  # key -> "pending" | class
    for clock, (kind, key) in enumerate(events):
        now = float(clock)
        if kind == "accept" and key not in state:
            if book.accept(key, f"s{key % 2}", now) is None:
                state[key] = "pending"
            for victim in book.take_evicted():
                assert state.pop(victim) is not None
        elif kind == "classify" and state.get(key) == "pending":
            name = "peer" if key % 2 else "local"
            verdict = book.classify(key, name)
            if verdict == name:
                state[key] = name
            else:
                del state[key]
        elif kind == "settle":
            book.settle(key)
        elif kind == "release":
            book.release(key)
            state.pop(key, None)
        pending = sum(1 for s in state.values() if s == "pending")
        assert book.total == len(state) <= caps.connections_max
        assert book.pending == pending <= caps.handshakes_cap
        assert book.classified <= caps.classified_cap
        assert (
            book.held("peer") == sum(1 for s in state.values() if s == "peer") <= max(1, total // 2)
        )
