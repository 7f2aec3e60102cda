"""Selection groups kept between rounds (`GroupCache`) are the groups numbered afresh.

Random rounds replace, copy, move, add and remove kept candidates drawn from a
small pool of models, states and freshness, so that runs, interleaved models
and repeated keys all occur; after each round the cache must give exactly
`assign_groups` of the round's candidates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.routing.group_cache import GroupCache
from grid.core.routing.groups import assign_groups
from grid.core.vocabulary import AdmissionState, RoutingPolicy, SelectionTier


@dataclass(frozen=True)
class Model:
    kind: str
    name: str
    fresh: bool


@dataclass(frozen=True)
class Verdict:
    candidate: Model
    admission: AdmissionState
    tier: SelectionTier


@dataclass(frozen=True)
class Placed:
    evaluation: Verdict


placed = st.builds(
    lambda kind, name, fresh, admission, tier: Placed(
        Verdict(Model(kind, name, fresh), admission, tier)
    ),
    st.sampled_from(["inference_model", "mcp_tool"]),
    st.sampled_from(["a", "b", "c"]),
    st.booleans(),
    st.sampled_from(list(AdmissionState)),
    st.sampled_from(list(SelectionTier)),
)
change = st.one_of(
    st.tuples(st.just("replace"), st.integers(0, 40), placed),
    st.tuples(st.just("add"), st.integers(0, 40), placed),
    st.tuples(st.just("remove"), st.integers(0, 40)),
    st.tuples(st.just("move"), st.integers(0, 40), st.integers(0, 40)),
    st.tuples(st.just("copy"), st.integers(0, 40)),
    st.just(("same",)),
)


def _apply(kept: list[Placed], step: tuple[Any, ...]) -> None:
    at = step[1] % len(kept) if len(step) > 1 and kept else 0
    match step[0]:
        case "replace" if kept:
            kept[at] = step[2]
        case "add":
            kept.insert(at, step[2])
        case "remove" if kept:
            del kept[at]
        case "move" if kept:
            kept.insert(step[2] % len(kept), kept.pop(at))
        case "copy" if kept:
            kept[at] = Placed(kept[at].evaluation)  # equal, but another record


@settings(max_examples=300)
@given(
    st.lists(placed, max_size=30),
    st.lists(st.tuples(change, st.sampled_from(list(RoutingPolicy))), min_size=1, max_size=20),
)
def test_kept_groups_are_the_groups_numbered_afresh_every_round(
    first: list[Placed], steps: list[tuple[tuple[Any, ...], RoutingPolicy]]
) -> None:
    kept, cache = list(first), GroupCache()
    for step, policy in [(("same",), RoutingPolicy.GEOGRAPHY_FIRST), *steps]:
        _apply(kept, step)
        assert cache.groups(kept, policy) == assign_groups(kept, policy), step


def test_one_replaced_place_is_the_only_one_read_again() -> None:
    model = Model("inference_model", "a", True)
    kept = [
        Placed(Verdict(model, AdmissionState.NEW_AND_EXISTING, tier))
        for tier in [SelectionTier.SAME_SITE] * 5 + [SelectionTier.SAME_REGION] * 5
    ]
    cache = GroupCache()
    assert cache.groups(kept, RoutingPolicy.GEOGRAPHY_FIRST) == (0,) * 5 + (1,) * 5
    kept[2] = Placed(Verdict(model, AdmissionState.NEW_AND_EXISTING, SelectionTier.SAME_REGION))
    assert cache.groups(kept, RoutingPolicy.GEOGRAPHY_FIRST) == (0, 0, 1, 2, 2, 3, 3, 3, 3, 3)
    assert cache.read == 1
