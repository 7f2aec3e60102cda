"""The signals listener's limits on the one connection book: classes, caps, the Local reserve."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.core.edge.connections import ConnectionBook, Refusal
from grid.core.signals.connections import ConnectionClass, ListenerLimits, connection_class
from grid.core.trust import PeerClass

LOCAL, PEER = ConnectionClass.LOCAL, ConnectionClass.PEER


def _book(limits: ListenerLimits | None = None) -> ConnectionBook:
    return ConnectionBook((limits or ListenerLimits()).caps())


def test_defaults_are_the_spec_values() -> None:
    limits = ListenerLimits()
    assert (limits.connections_max, limits.peer_connections_max) == (256, 248)
    assert limits.local_reserved == 8
    assert limits.request_budget_s == 5.0


def test_certificate_classes_map_to_book_classes() -> None:
    assert connection_class(PeerClass.LOCAL) is LOCAL
    assert connection_class(PeerClass.PEER) is PEER
    assert connection_class(PeerClass.UNKNOWN) is None


def test_peers_are_capped_and_local_keeps_its_reserve() -> None:
    book = _book()
    keys = iter(range(10_000))
    for _ in range(248):
        key = next(keys)
        assert book.accept(key, "p", 0.0) is None
        assert book.classify(key, PEER) is PEER
    key = next(keys)
    assert book.accept(key, "p", 0.0) is None
    assert book.classify(key, PEER) is Refusal.CLASS_FULL
    for _ in range(8):
        key = next(keys)
        assert book.accept(key, "l", 0.0) is None
        assert book.classify(key, LOCAL) is LOCAL
    assert book.accept(next(keys), "l", 0.0) is Refusal.FULL
    assert (book.held(PEER), book.held(LOCAL), book.pending) == (248, 8, 0)


def test_unknown_certificate_is_refused_and_frees_its_slot() -> None:
    book = _book(ListenerLimits(connections_max=2, peer_connections_max=1))
    assert book.accept("a", "s", 0.0) is None
    assert book.classify("a", connection_class(PeerClass.UNKNOWN)) is Refusal.UNAUTHORIZED
    assert book.total == 0


def test_release_returns_the_slot_to_its_class() -> None:
    book = _book(ListenerLimits(connections_max=2, peer_connections_max=1))
    book.accept("a", "s", 0.0)
    book.classify("a", PEER)
    book.release("a")
    book.accept("b", "s", 0.0)
    assert book.classify("b", PEER) is PEER


def test_limits_refuse_a_peer_cap_above_the_total() -> None:
    with pytest.raises(ValueError):
        ListenerLimits(connections_max=8, peer_connections_max=9)


_STEP = st.sampled_from(["accept", "local", "peer", "unknown", "close_l", "close_p", "fail"])


@given(st.lists(_STEP, max_size=400))
def test_caps_hold_under_any_sequence_of_events(steps: list[str]) -> None:
    limits = ListenerLimits(connections_max=12, peer_connections_max=9, handshakes_max=5)
    book = _book(limits)
    pending: list[int] = []
    held: dict[ConnectionClass, list[int]] = {LOCAL: [], PEER: []}
    for n, step in enumerate(steps):
        if step == "accept":
            classified_full = book.classified == limits.connections_max
            refused = book.accept(n, f"src{n % 3}", float(n))
            assert (refused is Refusal.FULL) == classified_full
            evicted = set(book.take_evicted())
            pending = [k for k in pending if k not in evicted]
            if refused is None:
                pending.append(n)
        elif step in ("local", "peer", "unknown") and pending:
            key = pending.pop(0)
            name = {"local": LOCAL, "peer": PEER}.get(step)
            peers_before = book.held(PEER)
            verdict = book.classify(key, name)
            if name is None:
                assert verdict is Refusal.UNAUTHORIZED
            elif name is LOCAL:
                assert verdict is LOCAL
            else:
                full = peers_before == limits.peer_connections_max
                assert verdict is (Refusal.CLASS_FULL if full else PEER)
            if verdict in (LOCAL, PEER):
                held[verdict].append(key)
        elif step == "fail" and pending:
            book.release(pending.pop())
        elif step in ("close_l", "close_p"):
            cls = LOCAL if step == "close_l" else PEER
            if held[cls]:
                book.release(held[cls].pop())
        assert book.classified <= limits.connections_max
        assert book.pending <= limits.handshakes_max
        assert book.held(PEER) <= limits.peer_connections_max
        assert book.pending == len(pending)
        # Peers alone never leave fewer than the reserve for Local.
        assert limits.connections_max - book.held(PEER) >= limits.local_reserved


def test_handshakes_have_their_own_bound_and_the_busiest_source_is_evicted() -> None:
    book = _book(ListenerLimits(handshakes_max=4))
    for n in range(4):
        assert book.accept(("flood", n), "10.0.0.9", float(n)) is None
    assert book.accept("local", "10.0.0.1", 5.0) is None
    assert book.take_evicted() == [("flood", 0)]
    assert book.accept(("flood", 4), "10.0.0.9", 6.0) is None
    assert book.take_evicted() == [("flood", 1)]
    assert book.classify("local", LOCAL) is LOCAL
    book.release(("flood", 0))  # already evicted: nothing to give back
    assert (book.pending, book.held(LOCAL), book.classified) == (3, 1, 1)
    assert book.evicted == 2
