"""Choosing among equivalent candidates: selection groups and modes (SPEC-DECISIONS §14).

Ranking orders a model's candidates; selection decides which of them serves the
next request. The overlay (or praxis.yaml's route filter) carries the policy:
``selection_policy`` is ``deterministic``, ``round_robin``, ``random`` or
``weighted_random``, and ``selection_load_aware: true`` turns ``random`` into
Grid's ``leastLoaded``. Each candidate carries its ``selection_group`` and,
where the mode reads them, ``traffic_weight`` and ``capacity_weight``.

For one request, in this order:

1. Session affinity: the candidate the session is bound to, while its
   admission still serves (``new_and_existing`` or ``existing_only``, never
   excluded, upstream's ``none``) and it is not ejected.
2. The active group: the first group with a viable candidate
   (``new_and_existing`` and not ejected). The mode picks one of its viable
   members:

   * ``deterministic``: the first (best ranked);
   * ``round_robin``: each in turn, in ``stable_id`` order after the last pick
     (a `Turn` kept across snapshots, so a reload or a re-rank that keeps
     the group's members keeps the rotation, whatever their new rank order);
   * ``random``: uniformly;
   * ``weighted_random``: in proportion to ``traffic_weight``;
   * load-aware (``leastLoaded``): power of two choices. Two distinct members
     are drawn in proportion to ``capacity_weight``, and the one with the
     lower load estimate per unit of weight wins; a tie goes to the better
     ranked.

3. Failover targets after the chosen one: the other viable candidates in rank
   order (the rest of the active group, then later groups), then ejected
   ``new_and_existing`` candidates as a last resort. At most ``limit`` in all.

`ModelPlan` does the per-snapshot work once (groups, weights, cumulative
sums), so a request costs a few list operations. Everything here is
synchronous and pure: the random source, the set of ejected candidates and
the load estimate are passed in.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from grid.core.vocabulary import CAPACITY_WEIGHT_MAX, CAPACITY_WEIGHT_MIN, AdmissionState
from grid.core.vocabulary import SelectionPolicy as WirePolicy

__all__ = [
    "DETERMINISTIC",
    "RANDOM",
    "ROUND_ROBIN",
    "SELECTION_POLICIES",
    "WEIGHTED_RANDOM",
    "WEIGHT_MAX",
    "WEIGHT_MIN",
    "ModelPlan",
    "Selectable",
    "SelectionPolicy",
    "Turn",
    "derive_groups",
    "select",
]

DETERMINISTIC = WirePolicy.DETERMINISTIC.value
ROUND_ROBIN = WirePolicy.ROUND_ROBIN.value
RANDOM = WirePolicy.RANDOM.value
WEIGHTED_RANDOM = WirePolicy.WEIGHTED_RANDOM.value
SELECTION_POLICIES = frozenset(p.value for p in WirePolicy)
"""The overlay's ``selection_policy`` values; absent means ``deterministic``."""

WEIGHT_MIN, WEIGHT_MAX = CAPACITY_WEIGHT_MIN, CAPACITY_WEIGHT_MAX
"""Bounds of ``traffic_weight`` and ``capacity_weight``; absent means 1."""

_SERVING = frozenset({AdmissionState.NEW_AND_EXISTING, AdmissionState.EXISTING_ONLY})


class Selectable(Protocol):
    """What selection reads of a candidate (the gateway's `Candidate` fits)."""

    @property
    def stable_id(self) -> str: ...
    @property
    def admission(self) -> AdmissionState: ...
    @property
    def selection_group(self) -> int: ...
    @property
    def traffic_weight(self) -> int: ...
    @property
    def capacity_weight(self) -> int: ...


C = TypeVar("C", bound=Selectable)


@dataclass(frozen=True)
class SelectionPolicy:
    """The overlay's ``selection_policy`` and ``selection_load_aware``."""

    mode: str = DETERMINISTIC
    load_aware: bool = False

    @property
    def least_loaded(self) -> bool:
        """Grid's ``leastLoaded``: load-aware over random (the only load-aware mode)."""
        return self.load_aware and self.mode == RANDOM

    @property
    def name(self) -> str:
        """The mode as the docs and metrics name it."""
        return "least_loaded" if self.least_loaded else self.mode


def derive_groups(keys: Sequence[Hashable]) -> list[int]:
    """Group numbers from 0 for contiguous runs of equal key (geographyFirst's rule)."""
    groups: list[int] = []
    previous: object = object()
    number = -1
    for key in keys:
        if key != previous:
            number += 1
            previous = key
        groups.append(number)
    return groups


@dataclass
class Turn:
    """Where ``round_robin`` stands for one model: the ``stable_id`` it picked last.

    The next pick is the active group's first member whose ``stable_id`` sorts
    after it (wrapping to the first). Held outside any snapshot, it survives
    overlay reloads and re-ranks: while the group's members are unchanged each
    is picked once per cycle, whichever order ranking puts them in; a member
    that joins or leaves shifts the rotation by no more than that member.
    """

    last: str | None = None


@dataclass(frozen=True)
class _Group:
    """The viable members of one group: positions in rank order, cumulative weights,
    and the members' ``stable_id`` in sorted order with their positions (round robin)."""

    members: tuple[int, ...]
    cumulative: tuple[int, ...]
    ids: tuple[str, ...]
    by_id: tuple[int, ...]

    @classmethod
    def of(cls, members: Sequence[int], weights: Sequence[int], ids: Sequence[str]) -> _Group:
        ordered = sorted(members, key=lambda i: ids[i])
        return cls(
            tuple(members),
            tuple(itertools.accumulate(weights[i] for i in members)),
            tuple(ids[i] for i in ordered),
            tuple(ordered),
        )


class ModelPlan(Generic[C]):
    """One model's candidates in rank order, grouped and weighted once per snapshot."""

    __slots__ = (
        "_groups",
        "_ids",
        "_turn",
        "candidates",
        "group_of",
        "open",
        "policy",
        "position",
        "weights",
    )

    def __init__(self, candidates: Sequence[C], policy: SelectionPolicy) -> None:
        self.candidates = tuple(candidates)
        self.policy = policy
        self.position = {c.stable_id: i for i, c in enumerate(self.candidates)}
        self.group_of = tuple(c.selection_group for c in self.candidates)
        self.open = tuple(
            i
            for i, c in enumerate(self.candidates)
            if c.admission == AdmissionState.NEW_AND_EXISTING
        )
        """Positions of the candidates that take new requests, in rank order."""
        if policy.least_loaded:
            self.weights = tuple(c.capacity_weight for c in self.candidates)
        elif policy.mode == WEIGHTED_RANDOM:
            self.weights = tuple(c.traffic_weight for c in self.candidates)
        else:
            self.weights = (1,) * len(self.candidates)
        self._ids = tuple(c.stable_id for c in self.candidates)
        self._groups = self._group(self.open)
        self._turn = Turn()
        """This plan's own rotation, for callers that keep no `Turn` across snapshots."""

    def _group(self, viable: Sequence[int]) -> _Group | None:
        """The active group among ``viable`` positions (rank order), if any."""
        if not viable:
            return None
        first = self.group_of[viable[0]]
        members = [i for i in viable if self.group_of[i] == first]
        return _Group.of(members, self.weights, self._ids)

    def active(self, viable: Sequence[int]) -> _Group | None:
        """The active group: precomputed when nothing is ejected."""
        return self._groups if viable is self.open else self._group(viable)

    def pick(
        self,
        group: _Group,
        rng: random.Random,
        load: Callable[[C], float],
        turn: Turn | None = None,
    ) -> int:
        """The position the mode picks among the active group's members."""
        members = group.members
        count = len(members)
        if count == 1:
            return members[0]
        policy = self.policy
        if policy.least_loaded:
            return self._two_choices(group, rng, load)
        mode = policy.mode
        if mode == ROUND_ROBIN:
            return _next_turn(group, turn or self._turn)
        if mode == RANDOM:
            return members[int(rng.random() * count)]
        if mode == WEIGHTED_RANDOM:
            return members[_draw(group.cumulative, rng.random() * group.cumulative[-1])]
        return members[0]

    def _two_choices(self, group: _Group, rng: random.Random, load: Callable[[C], float]) -> int:
        """Power of two choices: two distinct weighted draws, the lighter per unit of weight."""
        cumulative, members = group.cumulative, group.members
        total = cumulative[-1]
        a = _draw(cumulative, rng.random() * total)
        weight_a = cumulative[a] - (cumulative[a - 1] if a else 0)
        # The second draw leaves ``a`` out: draw in [0, total - weight_a) and step over it.
        r = rng.random() * (total - weight_a)
        if r >= cumulative[a] - weight_a:
            r += weight_a
        b = _draw(cumulative, r)
        if b == a:  # rounding at the very edge of a's interval
            b = a + 1 if a + 1 < len(members) else a - 1
        weight_b = cumulative[b] - (cumulative[b - 1] if b else 0)
        first, second = (a, b) if a < b else (b, a)
        w_first = weight_a if first == a else weight_b
        w_second = weight_b if first == a else weight_a
        candidates = self.candidates
        lf = load(candidates[members[first]])
        ls = load(candidates[members[second]])
        # lf / w_first <= ls / w_second without dividing; ties go to the better ranked.
        return members[first] if lf * w_second <= ls * w_first else members[second]


def _next_turn(group: _Group, turn: Turn) -> int:
    """The member after ``turn.last`` in ``stable_id`` order (wrapping); moves the turn."""
    ids = group.ids
    at = 0 if turn.last is None else bisect.bisect_right(ids, turn.last)
    if at >= len(ids):
        at = 0
    turn.last = ids[at]
    return group.by_id[at]


def _draw(cumulative: Sequence[int], r: float) -> int:
    """The index whose interval of the cumulative weights holds ``r``."""
    index = bisect.bisect_right(cumulative, r)
    return index if index < len(cumulative) else len(cumulative) - 1


def select(
    plan: ModelPlan[C],
    bound: str | None,
    limit: int,
    rng: random.Random,
    ejected: Collection[str],
    load: Callable[[C], float],
    turn: Turn | None = None,
) -> list[C]:
    """The candidates to try for one request, in order (see the module docstring).

    ``turn`` is the model's round-robin position kept by the caller across
    snapshots; without one the plan's own is used (it restarts with the plan).
    """
    candidates = plan.candidates
    chosen: list[int] = []
    if bound is not None:
        at = plan.position.get(bound)
        if at is not None and candidates[at].admission in _SERVING and bound not in ejected:
            chosen.append(at)
    viable = plan.open
    if ejected:
        viable = tuple(i for i in viable if candidates[i].stable_id not in ejected)
    group = plan.active(viable)
    if group is not None and len(chosen) < limit:
        pick = plan.pick(group, rng, load, turn)
        if pick not in chosen:
            chosen.append(pick)
        for i in viable:
            if len(chosen) >= limit:
                break
            if i not in chosen:
                chosen.append(i)
    if ejected and len(chosen) < limit:
        for i in plan.open:
            if len(chosen) >= limit:
                break
            if i not in chosen and candidates[i].stable_id in ejected:
                chosen.append(i)
    return [candidates[i] for i in chosen[:limit]]
