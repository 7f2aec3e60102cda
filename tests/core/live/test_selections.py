"""The last minute's selections from cumulative gateway counters (`grid.core.live.selections`)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.live.selections import WINDOW_S, SelectionWindow, recent_total

A, B = ("vllm-a", 0), ("vllm-b", 0)


def test_growth_within_the_window_only() -> None:
    w = SelectionWindow()
    w.observe(0.0, {A: 100})  # counts from before the first scrape are not the window's
    assert w.recent(0.0) == {}
    w.observe(10.0, {A: 110, B: 3})
    assert w.recent(10.0) == {A: 10, B: 3}
    w.observe(70.0, {A: 115, B: 3})
    # the window [10, 70] starts at the scrape of t=10
    assert w.recent(70.0) == {A: 5}
    w.observe(200.0, {A: 115, B: 3})
    assert w.recent(200.0) == {}


def test_a_gateway_that_stopped_answering_counts_nothing() -> None:
    w = SelectionWindow()
    w.observe(0.0, {A: 0})
    w.observe(5.0, {A: 7})
    assert w.recent(30.0) == {A: 7}
    assert w.recent(5.0 + WINDOW_S + 0.1) == {}


def test_a_restarted_gateway_counts_from_zero() -> None:
    w = SelectionWindow()
    w.observe(0.0, {A: 50})
    w.observe(5.0, {A: 4})
    assert w.recent(5.0) == {A: 4}


def test_gateways_sum() -> None:
    one, two = SelectionWindow(), SelectionWindow()
    for w, n in ((one, 3), (two, 4)):
        w.observe(0.0, {})
        w.observe(1.0, {A: n})
    assert recent_total([one, two], 1.0) == {A: 7}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 30.0), st.integers(0, 20)), min_size=1, max_size=40))
def test_the_window_counts_exactly_the_increments_since_its_start(
    steps: list[tuple[float, int]],
) -> None:
    """A rising counter: the growth is its value now less its value at the window's start."""
    w = SelectionWindow()
    t, value = 0.0, 0
    history = []
    for gap, increment in steps:
        t += gap
        value += increment
        w.observe(t, {A: value})
        history.append((t, value))
    at_start = [v for s, v in history if s <= t - WINDOW_S]
    base = at_start[-1] if at_start else history[0][1]
    expected = value - base
    assert w.recent(t) == ({A: expected} if expected else {})
    # only the window's start and what follows it are held
    assert all(s > t - WINDOW_S for s in w._times[1:])
