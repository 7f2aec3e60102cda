"""Selection groups kept from one round to the next (`GroupCache`).

`grid.core.routing.groups.assign_groups` reads each kept candidate's model
and group key, one candidate at a time. In a round in which one provider
changed, all but a few places of the overlay hold the very ranked record of
the last round (`grid.core.routing.ranking.Ordering` reuses them), so their
model and key are the last round's. The cache compares the places all at
once, reads the model and key of the others only, and numbers the groups
from the two columns in C: the places sorted by model (a stable sort keeps
each model's candidates in overlay order), a running count of key changes
within each model, and that count scattered back to the places. The numbers
are exactly `assign_groups`'s (a property test holds them equal).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import accumulate, compress
from operator import and_, is_not, mul, ne, not_, sub

from grid.core.routing.groups import Grouped
from grid.core.vocabulary import RoutingPolicy

_Model = tuple[str, str]
_Key = tuple[object, ...]


def _model(item: Grouped) -> _Model:
    candidate = item.evaluation.candidate
    return candidate.kind, candidate.name


def _key(item: Grouped, score_first: bool) -> _Key:
    """What `assign_groups` compares of one candidate (its states and freshness)."""
    evaluation = item.evaluation
    if score_first:
        return (evaluation.admission, bool(evaluation.candidate.fresh))
    return (evaluation.admission, evaluation.tier, bool(evaluation.candidate.fresh))


def numbered(models: Sequence[_Model], keys: Sequence[_Key]) -> tuple[int, ...]:
    """Each place's group: key changes since its model's first place, counted per model."""
    n = len(models)
    if n == 0:
        return ()
    order = sorted(range(n), key=models.__getitem__)  # stable: overlay order per model
    by_model = list(map(models.__getitem__, order))
    by_key = list(map(keys.__getitem__, order))
    starts = [True, *map(ne, by_model[1:], by_model[:-1])]
    splits = map(and_, map(not_, starts[1:]), map(ne, by_key[1:], by_key[:-1]))
    counts = list(accumulate(splits, initial=0))
    # The count is non-decreasing, so a run's base is the largest count at a start so far.
    bases = accumulate(map(mul, starts, counts), max)
    groups = [0] * n
    deque(map(groups.__setitem__, order, map(sub, counts, bases)), maxlen=0)
    return tuple(groups)


class GroupCache:
    """`assign_groups` of one gateway's kept candidates, read again only where they moved."""

    def __init__(self) -> None:
        self._ranked: tuple[Grouped, ...] = ()
        self._policy: RoutingPolicy | None = None
        self._models: list[_Model] = []
        self._keys: list[_Key] = []
        self.read = 0
        """Places whose model and key the last call read afresh."""

    def groups(self, ranked: Sequence[Grouped], policy: RoutingPolicy) -> tuple[int, ...]:
        """`assign_groups(ranked, policy)`, from the last call's columns where they hold."""
        ranked = tuple(ranked)
        score_first = policy is RoutingPolicy.SCORE_FIRST
        if policy is not self._policy or len(ranked) != len(self._ranked):
            models = [_model(r) for r in ranked]
            keys = [_key(r, score_first) for r in ranked]
            self.read = len(ranked)
        else:
            models, keys = list(self._models), list(self._keys)
            moved = list(compress(range(len(ranked)), map(is_not, ranked, self._ranked)))
            for i in moved:
                models[i], keys[i] = _model(ranked[i]), _key(ranked[i], score_first)
            self.read = len(moved)
        self._ranked, self._policy, self._models, self._keys = ranked, policy, models, keys
        return numbered(models, keys)
