"""Stabilized admission: upstream's pressure hysteresis as a pure machine.

Under ``admissionPolicy.mode: stabilized`` a candidate group (one provider at one
site) does not flip between new_and_existing and existing_only on every sample.
The machine keeps, per group, its state, the consecutive counts and the time it
entered the state, and is fed one pressure ratio per render together with
``now`` (it reads no clock):

* ``open`` (new_and_existing) -> ``held`` (existing_only) after
  ``failureThreshold`` consecutive observations at or above ``enterThreshold``,
  once the group has been open for ``minimumStateDuration``;
* ``held`` -> ``open`` after ``successThreshold`` consecutive observations below
  ``exitThreshold``, once the group has been held for ``minimumStateDuration``
  and ``recoveryHoldDown`` has passed since the last observation at or above
  ``enterThreshold``;
* an observation between the two thresholds resets both counts; a missing ratio
  (None) changes nothing, since no evidence is no evidence (the missing-metrics
  rule is applied on its own, `grid.core.routing.admission_policy`).

A group seen for the first time starts ``open`` with ``entered_at = now``. The
operator's overlay loop owns one machine and passes `Hysteresis.held` to each
render; pure ``grid render`` has no history, so it applies thresholds only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from grid.core.resources.duration import parse_duration
from grid.core.resources.network_policy import PressureSpec

GroupKey = tuple[str, str]
"""A candidate group: (site, provider name)."""


@dataclass(frozen=True)
class PressureRules:
    """The six pressure settings, durations in seconds."""

    enter: float
    exit: float
    failures: int
    successes: int
    minimum_state_s: float
    recovery_hold_down_s: float

    @classmethod
    def from_spec(cls, spec: PressureSpec) -> PressureRules:
        """The rules of an ``admissionPolicy.pressure``."""
        return cls(
            enter=spec.enter_threshold,
            exit=spec.exit_threshold,
            failures=spec.failure_threshold,
            successes=spec.success_threshold,
            minimum_state_s=parse_duration(spec.minimum_state_duration),
            recovery_hold_down_s=parse_duration(spec.recovery_hold_down),
        )


@dataclass(frozen=True)
class GroupState:
    """One group's hysteresis state."""

    held: bool
    entered_at: float
    over: int = 0
    """Consecutive observations at or above the enter threshold."""
    under: int = 0
    """Consecutive observations below the exit threshold."""
    last_pressure_at: float | None = None
    """When a ratio was last at or above the enter threshold."""


def step(state: GroupState, ratio: float | None, now: float, rules: PressureRules) -> GroupState:
    """The state after observing ``ratio`` at ``now``."""
    if ratio is None:
        return state
    if ratio >= rules.enter:
        state = replace(state, over=state.over + 1, under=0, last_pressure_at=now)
    elif ratio < rules.exit:
        state = replace(state, over=0, under=state.under + 1)
    else:
        state = replace(state, over=0, under=0)
    settled = now - state.entered_at >= rules.minimum_state_s
    if not state.held and settled and state.over >= rules.failures:
        return GroupState(True, now, last_pressure_at=state.last_pressure_at)
    if state.held and settled and state.under >= rules.successes:
        last = state.last_pressure_at
        if last is None or now - last >= rules.recovery_hold_down_s:
            return GroupState(False, now, last_pressure_at=last)
    return state


class Hysteresis:
    """Every group's state across renders; the operator's overlay loop owns one."""

    def __init__(self, rules: PressureRules) -> None:
        self.rules = rules
        self.groups: dict[GroupKey, GroupState] = {}

    def observe(self, ratios: Mapping[GroupKey, float | None], now: float) -> frozenset[GroupKey]:
        """Feed one render's ratios; forget groups no longer present; the held set."""
        groups: dict[GroupKey, GroupState] = {}
        for key, ratio in ratios.items():
            current = self.groups.get(key) or GroupState(held=False, entered_at=now)
            groups[key] = step(current, ratio, now, self.rules)
        self.groups = groups
        return self.held

    @property
    def held(self) -> frozenset[GroupKey]:
        """The groups in existing_only admission."""
        return frozenset(k for k, s in self.groups.items() if s.held)
