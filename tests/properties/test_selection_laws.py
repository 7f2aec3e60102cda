"""Laws of selection among equivalent candidates (SPEC-DECISIONS §14)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.routing.selection import (
    DETERMINISTIC,
    RANDOM,
    ROUND_ROBIN,
    WEIGHTED_RANDOM,
    ModelPlan,
    SelectionPolicy,
    Turn,
    select,
)
from grid.core.vocabulary import AdmissionState

NEW_AND_EXISTING = AdmissionState.NEW_AND_EXISTING
EXISTING_ONLY = AdmissionState.EXISTING_ONLY
EXCLUDED = AdmissionState.EXCLUDED
ADMISSIONS = (NEW_AND_EXISTING, EXISTING_ONLY, EXCLUDED)
POLICIES = (
    SelectionPolicy(DETERMINISTIC),
    SelectionPolicy(ROUND_ROBIN),
    SelectionPolicy(RANDOM),
    SelectionPolicy(WEIGHTED_RANDOM),
    SelectionPolicy(RANDOM, load_aware=True),
)


@dataclass(frozen=True)
class Cand:
    stable_id: str
    admission: AdmissionState
    selection_group: int
    traffic_weight: int = 1
    capacity_weight: int = 1


@st.composite
def plans(draw: st.DrawFn) -> list[Cand]:
    count = draw(st.integers(1, 8))
    group = 0
    out = []
    for i in range(count):
        if i and draw(st.booleans()):
            group += 1
        out.append(
            Cand(
                f"c{i}",
                draw(st.sampled_from(ADMISSIONS)),
                group,
                draw(st.integers(1, 1000)),
                draw(st.integers(1, 1000)),
            )
        )
    return out


def _viable(cands: list[Cand], ejected: set[str]) -> list[Cand]:
    return [c for c in cands if c.admission == NEW_AND_EXISTING and c.stable_id not in ejected]


@settings(max_examples=300, deadline=None)
@given(
    plans(),
    st.sampled_from(POLICIES),
    st.sets(st.sampled_from([f"c{i}" for i in range(8)])),
    st.lists(st.integers(0, 20), min_size=8, max_size=8),
    st.integers(0, 2**32),
)
def test_the_pick_stays_in_the_active_group_and_failover_keeps_ejected_last(
    cands: list[Cand], policy: SelectionPolicy, ejected: set[str], loads: list[int], seed: int
) -> None:
    plan = ModelPlan(cands, policy)
    rng = random.Random(seed)
    tries = select(plan, None, 3, rng, ejected, lambda c: float(loads[int(c.stable_id[1:])]))
    viable = _viable(cands, ejected)
    assert len(tries) == len({c.stable_id for c in tries}) <= 3
    assert all(c.admission == NEW_AND_EXISTING for c in tries)
    if viable:
        active = viable[0].selection_group
        assert tries[0].selection_group == active
        assert tries[0] in viable
        # After the pick: the other viable ones in rank order, then the ejected ones.
        rest = [c for c in viable if c != tries[0]]
        assert (
            tries[1:]
            == (rest + [c for c in cands if c not in viable and c in tries])[: len(tries) - 1]
        )
    else:
        assert all(c.stable_id in ejected for c in tries)
    if policy.mode == DETERMINISTIC and viable:
        assert tries[0] == viable[0]


@settings(max_examples=300, deadline=None)
@given(
    plans(),
    st.sampled_from(POLICIES),
    st.sets(st.sampled_from([f"c{i}" for i in range(8)])),
    st.integers(0, 7),
    st.integers(0, 2**32),
)
def test_affinity_comes_first_while_its_candidate_still_serves(
    cands: list[Cand], policy: SelectionPolicy, ejected: set[str], index: int, seed: int
) -> None:
    bound = cands[index % len(cands)]
    tries = select(
        ModelPlan(cands, policy), bound.stable_id, 3, random.Random(seed), ejected, lambda _c: 0.0
    )
    serves = bound.admission in (NEW_AND_EXISTING, EXISTING_ONLY)
    if serves and bound.stable_id not in ejected:
        assert tries[0] == bound
    else:
        assert bound not in tries or (
            bound.stable_id in ejected and bound.admission == NEW_AND_EXISTING
        )
    assert all(c.admission != EXCLUDED for c in tries)
    assert all(c.admission == NEW_AND_EXISTING for c in tries[1:])


@settings(max_examples=8, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=2, max_size=5), st.integers(0, 2**32))
def test_weighted_random_matches_its_weights_within_two_percent(
    weights: list[int], seed: int
) -> None:
    cands = [Cand(f"c{i}", NEW_AND_EXISTING, 0, traffic_weight=w) for i, w in enumerate(weights)]
    plan = ModelPlan(cands, SelectionPolicy(WEIGHTED_RANDOM))
    rng = random.Random(seed)
    draws = 100_000
    counts = Counter(
        select(plan, None, 1, rng, (), lambda _c: 0.0)[0].stable_id for _ in range(draws)
    )
    total = sum(weights)
    for i, weight in enumerate(weights):
        assert abs(counts[f"c{i}"] / draws - weight / total) <= 0.02


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 8), st.integers(1, 30), st.integers(0, 3))
def test_round_robin_spreads_evenly(members: int, rounds: int, others: int) -> None:
    cands = [Cand(f"a{i}", NEW_AND_EXISTING, 0) for i in range(members)]
    cands += [Cand(f"b{i}", NEW_AND_EXISTING, 1) for i in range(others)]
    plan = ModelPlan(cands, SelectionPolicy(ROUND_ROBIN))
    rng = random.Random(0)
    picks = Counter(
        select(plan, None, 1, rng, (), lambda _c: 0.0)[0].stable_id for _ in range(members * rounds)
    )
    assert picks == {f"a{i}": rounds for i in range(members)}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 1000), st.integers(0, 50)), min_size=2, max_size=6),
    st.integers(0, 2**32),
)
def test_least_loaded_never_picks_the_heaviest_per_unit_of_weight(
    members: list[tuple[int, int]], seed: int
) -> None:
    cands = [
        Cand(f"c{i}", NEW_AND_EXISTING, 0, capacity_weight=w) for i, (w, _) in enumerate(members)
    ]
    loads = {c.stable_id: float(members[i][1]) for i, c in enumerate(cands)}
    plan = ModelPlan(cands, SelectionPolicy(RANDOM, load_aware=True))
    pick = select(plan, None, 1, random.Random(seed), (), lambda c: loads[c.stable_id])[0]
    per_weight = [loads[c.stable_id] / c.capacity_weight for c in cands]
    worst = max(per_weight)
    if per_weight.count(worst) == 1:
        assert per_weight[cands.index(pick)] < worst


@settings(max_examples=100, deadline=None)
@given(
    st.integers(2, 8),
    st.integers(1, 20),
    st.lists(st.permutations(range(8)), min_size=1, max_size=12),
    st.integers(0, 3),
)
def test_round_robin_keeps_its_turn_across_re_ranks(
    members: int, rounds: int, orders: list[list[int]], per_snapshot: int
) -> None:
    """A new plan per re-rank (any order of the same members) keeps the rotation even."""
    turn = Turn()
    rng = random.Random(0)
    picks: Counter[str] = Counter()
    total = members * rounds
    index = 0
    while sum(picks.values()) < total:
        order = [i for i in orders[index % len(orders)] if i < members]
        index += 1
        cands = [Cand(f"a{i}", NEW_AND_EXISTING, 0) for i in order]
        plan = ModelPlan(cands, SelectionPolicy(ROUND_ROBIN))
        for _ in range(min(per_snapshot or 1, total - sum(picks.values()))):
            picks[select(plan, None, 1, rng, (), lambda _c: 0.0, turn)[0].stable_id] += 1
    assert picks == {f"a{i}": rounds for i in range(members)}


def test_round_robin_without_a_kept_turn_restarts_with_each_plan() -> None:
    """The contrast: a plan's own turn starts afresh, so one pick per plan never moves."""
    cands = [Cand(f"a{i}", NEW_AND_EXISTING, 0) for i in range(3)]
    firsts = {
        select(ModelPlan(cands, SelectionPolicy(ROUND_ROBIN)), None, 1, random.Random(0), (), _0)[
            0
        ].stable_id
        for _ in range(5)
    }
    assert firsts == {"a0"}


def _0(_c: object) -> float:
    return 0.0


def test_round_robin_turn_survives_a_member_leaving_and_rejoining() -> None:
    turn = Turn()
    rng = random.Random(0)
    three = [Cand(f"a{i}", NEW_AND_EXISTING, 0) for i in range(3)]
    full = ModelPlan(three, SelectionPolicy(ROUND_ROBIN))
    assert [select(full, None, 1, rng, (), _0, turn)[0].stable_id for _ in range(2)] == [
        "a0",
        "a1",
    ]
    without_a2 = ModelPlan(three[:2], SelectionPolicy(ROUND_ROBIN))
    assert select(without_a2, None, 1, rng, (), _0, turn)[0].stable_id == "a0"
    assert [select(full, None, 1, rng, (), _0, turn)[0].stable_id for _ in range(3)] == [
        "a1",
        "a2",
        "a0",
    ]


def test_least_loaded_at_zero_load_splits_by_rank_as_the_docs_say() -> None:
    """docs/routing.md: every comparison ties, so rank i of k takes 2(k-1-i)/(k(k-1))."""
    for k in (2, 3, 4):
        cands = [Cand(f"r{i}", NEW_AND_EXISTING, 0) for i in range(k)]
        plan = ModelPlan(cands, SelectionPolicy(RANDOM, load_aware=True))
        rng = random.Random(k)
        draws = 60_000
        picks = Counter(select(plan, None, 1, rng, (), _0)[0].stable_id for _ in range(draws))
        for i in range(k):
            assert abs(picks[f"r{i}"] / draws - 2 * (k - 1 - i) / (k * (k - 1))) < 0.01, picks
