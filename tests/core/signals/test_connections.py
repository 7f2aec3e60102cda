"""The signals listener's connection book: classes, caps and the Local reserve."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.core.signals.connections import ConnectionBook, ConnectionClass, ListenerLimits, Refusal
from grid.core.trust import PeerClass


def test_defaults_are_the_spec_values() -> None:
    limits = ListenerLimits()
    assert (limits.connections_max, limits.peer_connections_max) == (256, 248)
    assert limits.local_reserved == 8
    assert limits.request_budget_s == 5.0


def test_peers_are_capped_and_local_keeps_its_reserve() -> None:
    book = ConnectionBook()
    for _ in range(248):
        assert book.accept() is None
        assert book.classify(PeerClass.PEER) is ConnectionClass.PEER
    assert book.accept() is None
    assert book.classify(PeerClass.PEER) is Refusal.PEERS_FULL
    for _ in range(8):
        assert book.accept() is None
        assert book.classify(PeerClass.LOCAL) is ConnectionClass.LOCAL
    assert book.accept() is Refusal.FULL
    assert (book.peer, book.local, book.pending) == (248, 8, 0)


def test_unknown_certificate_is_refused_and_frees_its_slot() -> None:
    book = ConnectionBook(ListenerLimits(connections_max=2, peer_connections_max=1))
    assert book.accept() is None
    assert book.classify(PeerClass.UNKNOWN) is Refusal.UNAUTHORIZED
    assert book.total == 0


def test_release_returns_the_slot_to_its_class() -> None:
    book = ConnectionBook(ListenerLimits(connections_max=2, peer_connections_max=1))
    book.accept()
    book.classify(PeerClass.PEER)
    book.release(ConnectionClass.PEER)
    book.accept()
    assert book.classify(PeerClass.PEER) is ConnectionClass.PEER


def test_releasing_what_was_never_held_is_an_error() -> None:
    book = ConnectionBook()
    with pytest.raises(RuntimeError):
        book.release(ConnectionClass.LOCAL)
    with pytest.raises(RuntimeError):
        book.abandon()


def test_limits_refuse_a_peer_cap_above_the_total() -> None:
    with pytest.raises(ValueError):
        ListenerLimits(connections_max=8, peer_connections_max=9)


_STEP = st.sampled_from(["accept", "local", "peer", "unknown", "abandon", "close_l", "close_p"])


@given(st.lists(_STEP, max_size=400))
def test_caps_hold_under_any_sequence_of_events(steps: list[str]) -> None:
    limits = ListenerLimits(connections_max=12, peer_connections_max=9)
    book = ConnectionBook(limits)
    for step in steps:
        if step == "accept":
            refused = book.accept()
            assert (refused is Refusal.FULL) == (book.total == limits.connections_max)
        elif step in ("local", "peer", "unknown") and book.pending:
            peer_class = {"local": PeerClass.LOCAL, "peer": PeerClass.PEER}.get(
                step, PeerClass.UNKNOWN
            )
            peers_before = book.peer
            verdict = book.classify(peer_class)
            if step == "local":
                assert verdict is ConnectionClass.LOCAL
            if step == "peer":
                full = peers_before == limits.peer_connections_max
                assert verdict is (Refusal.PEERS_FULL if full else ConnectionClass.PEER)
        elif step == "abandon" and book.pending:
            book.abandon()
        elif step == "close_l" and book.local:
            book.release(ConnectionClass.LOCAL)
        elif step == "close_p" and book.peer:
            book.release(ConnectionClass.PEER)
        assert book.total <= limits.connections_max
        assert book.peer <= limits.peer_connections_max
        # Peers alone never leave fewer than the reserve for Local and handshakes.
        assert limits.connections_max - book.peer >= limits.local_reserved


def test_handshakes_have_their_own_bound_and_the_busiest_source_is_evicted() -> None:
    book = ConnectionBook(ListenerLimits(handshakes_max=4))
    for n in range(4):
        assert book.accept(("flood", n), "10.0.0.9", float(n)) is None
    assert book.accept("local", "10.0.0.1", 5.0) is None
    assert book.take_evicted() == [("flood", 0)]
    assert book.accept(("flood", 4), "10.0.0.9", 6.0) is None
    assert book.take_evicted() == [("flood", 1)]
    assert book.classify(PeerClass.LOCAL, "local") is ConnectionClass.LOCAL
    book.abandon(("flood", 0))  # already evicted: nothing to give back
    assert (book.pending, book.local, book.classified) == (3, 1, 1)
