"""Passive health: ejection after consecutive failures, doubling back-off, reset, forgetting."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.routing.load import LoadBook
from grid.core.routing.passive_health import PassiveHealth
from grid.testing.clock import FakeClock


def _health() -> tuple[FakeClock, PassiveHealth]:
    clock = FakeClock()
    return clock, PassiveHealth(lambda: clock.now)


def _fail(health: PassiveHealth, stable_id: str, times: int) -> list[bool]:
    return [health.failure(stable_id) for _ in range(times)]


def test_three_consecutive_failures_eject_for_ten_seconds() -> None:
    clock, health = _health()
    assert _fail(health, "a", 3) == [False, False, True]
    assert "a" in health.ejected()
    clock.run_for(9.9)
    assert "a" in health.ejected()
    clock.run_for(0.1)
    assert "a" not in health.ejected()
    assert health.ejections == 1


def test_a_success_between_failures_resets_the_count() -> None:
    _clock, health = _health()
    _fail(health, "a", 2)
    health.success("a")
    assert _fail(health, "a", 2) == [False, False]
    assert not health.ejected()


def test_each_repeat_doubles_up_to_three_hundred_seconds_and_a_success_resets() -> None:
    clock, health = _health()
    lasted = []
    for _ in range(8):
        assert _fail(health, "a", 3)[-1]
        until = health.ejected_until("a")
        assert until is not None
        lasted.append(until - clock.now)
        clock.run_for(until - clock.now)
    assert lasted == [10, 20, 40, 80, 160, 300, 300, 300]
    health.success("a")
    _fail(health, "a", 3)
    assert health.ejected_until("a") == clock.now + 10


def test_failures_while_ejected_do_not_extend_it_and_a_success_ends_it() -> None:
    clock, health = _health()
    _fail(health, "a", 3)
    clock.run_for(5)
    assert _fail(health, "a", 5) == [False] * 5
    assert health.ejected_until("a") == 10
    health.success("a")
    assert not health.ejected()


def test_forget_drops_candidates_that_left_the_snapshot() -> None:
    _clock, health = _health()
    _fail(health, "a", 3)
    _fail(health, "b", 1)
    health.forget({"b"})
    assert not health.ejected() and len(health) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["fail", "ok", "wait"]), max_size=60))
def test_ejected_exactly_when_the_last_three_outcomes_since_return_failed(
    events: list[str],
) -> None:
    clock, health = _health()
    streak = 0  # failures since the last success or the last return from ejection
    until = None
    for event in events:
        if until is not None and clock.now >= until:
            until, streak = None, 0
        if event == "wait":
            clock.run_for(7)
        elif event == "ok":
            health.success("a")
            until, streak = None, 0
        elif until is None:
            streak += 1
            ejected = health.failure("a")
            assert ejected == (streak == 3)
            if ejected:
                until = health.ejected_until("a")
                streak = 0
        else:
            assert not health.failure("a")
        if until is not None and clock.now >= until:
            until, streak = None, 0
        assert ("a" in health.ejected()) == (until is not None)


def test_the_load_book_adds_the_others_queue_never_below_zero() -> None:
    book = LoadBook()
    book.start("a")
    book.start("a")
    book.start("b")
    book.take_report({"a": 5, "b": 0})
    assert book.queue("a") == 2 + 3
    assert book.queue("b") == 1 + 0
    book.end("a")
    book.end("a")
    book.end("b")
    book.end("b")  # an extra end never goes negative
    assert book.queue("a") == 3 and book.queue("b") == 0
    assert book.in_flight == {}
    book.forget({"b"})
    assert book.queue("a") == 0
