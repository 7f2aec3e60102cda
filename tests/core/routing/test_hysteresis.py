"""The stabilized-admission machine: its edges as tables, its laws with Hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.core.routing.hysteresis import GroupState, Hysteresis, PressureRules, step

RULES = PressureRules(
    enter=0.85, exit=0.70, failures=2, successes=3, minimum_state_s=10.0, recovery_hold_down_s=30.0
)
"""Upstream's defaults."""

KEY = ("east", "vllm")


def run(ratios: list[tuple[float, float | None]], rules: PressureRules = RULES) -> list[bool]:
    """Feed (now, ratio) pairs to a machine; whether the group is held after each."""
    machine = Hysteresis(rules)
    return [KEY in machine.observe({KEY: ratio}, now) for now, ratio in ratios]


def test_one_observation_above_enter_does_not_hold() -> None:
    assert run([(0, 0.5), (20, 0.9), (40, 0.5)]) == [False, False, False]


def test_failure_threshold_consecutive_observations_hold() -> None:
    assert run([(0, 0.5), (20, 0.9), (40, 0.9)]) == [False, False, True]


def test_an_observation_between_thresholds_resets_the_count() -> None:
    assert run([(0, 0.5), (20, 0.9), (30, 0.8), (40, 0.9)]) == [False] * 4


def test_entering_waits_for_the_minimum_state_duration() -> None:
    # First seen at 0 (open since 0): two high samples before 10 s do not hold yet.
    assert run([(0, 0.9), (5, 0.9), (10, 0.9)]) == [False, False, True]


def test_exactly_at_enter_counts_as_pressure() -> None:
    assert run([(0, 0.5), (20, 0.85), (40, 0.85)]) == [False, False, True]


def held_at(t: float) -> list[tuple[float, float | None]]:
    """Samples that hold the group from ``t`` (two high ones at t-10 and t)."""
    return [(0, 0.5), (t - 10, 0.95), (t, 0.95)]


def test_leaving_needs_success_threshold_samples_below_exit() -> None:
    samples = [*held_at(20), (60, 0.5), (70, 0.5), (80, 0.5)]
    assert run(samples)[-3:] == [True, True, False]


def test_a_sample_between_thresholds_restarts_recovery() -> None:
    samples = [*held_at(20), (60, 0.5), (70, 0.5), (75, 0.75), (80, 0.5), (90, 0.5), (100, 0.5)]
    assert run(samples)[-4:] == [True, True, True, False]


def test_exactly_at_exit_is_not_recovery() -> None:
    samples = [*held_at(20), (60, 0.70), (70, 0.70), (80, 0.70)]
    assert run(samples)[-1] is True


def test_recovery_waits_for_the_hold_down_since_the_last_pressure() -> None:
    # Last pressure at 20: three low samples by 40 are enough by count, not by time.
    samples = [*held_at(20), (30, 0.1), (35, 0.1), (40, 0.1), (49, 0.1), (50, 0.1)]
    assert run(samples)[-5:] == [True, True, True, True, False]


def test_missing_ratios_change_nothing() -> None:
    assert run([(0, 0.5), (20, 0.9), (30, None), (40, 0.9)]) == [False, False, False, True]
    samples = [*held_at(20), (60, None), (70, None), (80, None), (90, None)]
    assert set(run(samples)[-4:]) == {True}


def test_a_group_gone_from_a_round_is_forgotten() -> None:
    machine = Hysteresis(RULES)
    for now in (0, 20, 40):
        machine.observe({KEY: 0.95}, now)
    assert machine.held == {KEY}
    machine.observe({}, 50)
    assert machine.observe({KEY: 0.95}, 60) == frozenset()


@pytest.mark.parametrize(
    ("state", "ratio", "held"),
    [
        (GroupState(held=False, entered_at=0, over=1), 0.9, True),
        (GroupState(held=False, entered_at=0, over=1), 0.8, False),
        (GroupState(held=True, entered_at=0, under=2, last_pressure_at=0), 0.1, False),
        (GroupState(held=True, entered_at=0, under=2, last_pressure_at=90), 0.1, True),
        (GroupState(held=True, entered_at=95, under=2, last_pressure_at=0), 0.1, True),
    ],
)
def test_step_edges(state: GroupState, ratio: float, held: bool) -> None:
    assert step(state, ratio, 100.0, RULES).held is held


ratios = st.one_of(st.none(), st.floats(0.0, 1.0))


@given(st.lists(st.tuples(st.floats(0.0, 5.0), ratios), max_size=40))
def test_the_state_changes_only_with_enough_evidence(
    samples: list[tuple[float, float | None]],
) -> None:
    state = GroupState(held=False, entered_at=0.0)
    now = 0.0
    for gap, ratio in samples:
        now += gap
        after = step(state, ratio, now, RULES)
        if after.held != state.held:
            # Every flip follows the rule's count, the minimum duration and the ratio side.
            assert ratio is not None
            assert now - state.entered_at >= RULES.minimum_state_s
            if after.held:
                assert ratio >= RULES.enter and state.over + 1 >= RULES.failures
            else:
                assert ratio < RULES.exit and state.under + 1 >= RULES.successes
            assert after.entered_at == now and after.over == after.under == 0
        state = after


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30), st.floats(0.0, 0.69))
def test_enough_calm_always_recovers(noise: list[float], calm: float) -> None:
    machine = Hysteresis(RULES)
    now = 0.0
    for ratio in noise:
        machine.observe({KEY: ratio}, now)
        now += 10.0
    for _ in range(RULES.successes + 5):
        machine.observe({KEY: calm}, now)
        now += 10.0
    assert machine.held == frozenset()
