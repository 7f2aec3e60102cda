"""Keeping a render's rank order from one round to the next (`OrderCache`).

`grid.core.routing.ranking.order_candidates` sorts every eligible candidate
of a render. In a round where one provider changed, all but that provider's
candidates come back with the very evaluation and sort key of the last round
(the render cache's scorer keeps them, `grid.core.routing.render_cache`), so
the order of the last round is already the order of all but a few. The cache
keeps that sorted order, takes out the candidates of the groups that went or
changed and puts the new ones in by binary search, and reuses each ranked
record (`RankedCandidate`) whose place and evaluation stayed the same.

That is the sort's result exactly when no two candidates have equal keys (a
stable sort keeps equal keys in input order, which the cache does not know)
and every key compares as a total order (no NaN score); the cache checks both
and sorts everything afresh whenever either may fail, or when too much
changed for insertion to pay. A property test holds it to `order_candidates`.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from itertools import chain, compress, pairwise
from operator import attrgetter, is_not
from typing import NamedTuple

from grid.core.routing.candidate import CandidateInput, ExclusionReason
from grid.core.routing.ranking import GroupScore, Ordering, SortKey, exclusion
from grid.core.routing.scoring import Evaluation

_Excluded = tuple[CandidateInput, Evaluation, ExclusionReason]


class _KeptGroup(NamedTuple):
    """One group's part of the order: its ranked members, their keys, its exclusions."""

    group: Sequence[CandidateInput]
    evaluation: Evaluation
    shared_key: tuple[float | str, ...]
    members: tuple[CandidateInput, ...]
    keys: tuple[SortKey, ...]
    excluded: tuple[_Excluded, ...]


def _kept_group(group: Sequence[CandidateInput], scored: GroupScore) -> _KeptGroup:
    """What `order_candidates` makes of one group, given its shared evaluation and key."""
    evaluation, shared_key = scored
    members: list[CandidateInput] = []
    keys: list[SortKey] = []
    excluded: list[_Excluded] = []
    for candidate in group:
        reason = exclusion(candidate, evaluation)
        if reason is not None:
            excluded.append((candidate, evaluation, reason))
        else:
            members.append(candidate)
            keys.append((*shared_key, candidate.name, candidate.cluster))
    return _KeptGroup(group, evaluation, shared_key, tuple(members), tuple(keys), tuple(excluded))


def _total(key: SortKey) -> bool:
    """Whether ``key`` compares as part of a total order (no NaN in it)."""
    return not any(isinstance(part, float) and math.isnan(part) for part in key)


def _unique(keys: Sequence[SortKey]) -> bool:
    """Whether sorted ``keys`` hold no two equal keys and no NaN."""
    return all(map(_total, keys)) and all(a != b for a, b in pairwise(keys))


class OrderCache:
    """The last render's sorted order, to move only what changed in the next one."""

    INSERTS_MAX_SHARE = 0.25
    """Past this share of the candidates changed, the order is sorted afresh."""

    def __init__(self) -> None:
        self._groups: dict[int, _KeptGroup] = {}
        self._keys: list[SortKey] = []
        self._members: list[CandidateInput] = []
        self._evaluations: list[Evaluation] = []
        self._ordering: Ordering | None = None
        """The last order (its ranked records are reused where they still hold)."""
        self._valid = False
        """The kept order has unique, totally ordered keys (insertion gives the sort's)."""
        self.moved = 0
        """Candidates the last order took out or put in (-1: it sorted everything)."""
        self._inputs: list[Sequence[CandidateInput]] = []
        self._places: list[_KeptGroup | None] = []
        """The last order's groups as given, and what was kept of each (None: empty)."""
        self.patched = False
        """The last order looked only at the places whose group changed (`_patch`)."""
        self.removed: list[_KeptGroup] = []
        self.added: list[_KeptGroup] = []
        """The groups the last order took out and put in."""

    def order(
        self,
        groups: Iterable[Sequence[CandidateInput]],
        score: Callable[[CandidateInput], GroupScore],
        steady: bool = False,
    ) -> Ordering:
        """`order_candidates` of ``groups`` with ``score``, from the last order where it holds.

        ``steady``: ``score`` answers for each group the last order saw what it
        answered then (the render cache's scores held), so only the places
        holding another group than last time are scored and moved (`_patch`).
        """
        given = list(groups)
        self.patched = False
        if steady and self._patch(given, score):
            self.patched = True
            return self._ordering  # type: ignore[return-value]
        kept = self._groups
        fresh: dict[int, _KeptGroup] = {}
        listed: list[_KeptGroup] = []
        places: list[_KeptGroup | None] = []
        excluded: list[_Excluded] = []
        added: list[_KeptGroup] = []
        repeated = False
        for group in given:
            if not group:
                places.append(None)
                continue
            evaluation, shared_key = score(group[0])
            old = kept.get(id(group))
            if (
                old is None
                or old.group is not group
                or old.evaluation is not evaluation
                or old.shared_key is not shared_key
            ):
                old = _kept_group(group, (evaluation, shared_key))
                added.append(old)
            repeated = repeated or id(group) in fresh
            fresh[id(group)] = old
            listed.append(old)
            places.append(old)
            excluded.extend(old.excluded)
        removed = [g for i, g in kept.items() if fresh.get(i) is not g]
        self._groups = fresh
        self._inputs, self._places = given, places
        self.removed, self.added = removed, added
        moving = sum(len(g.keys) for g in (*added, *removed))
        if (
            self._valid
            and not repeated
            and moving <= max(8, len(self._keys) * self.INSERTS_MAX_SHARE)
            and self._move(removed, added)
        ):
            self.moved = moving
        else:
            self._sort(listed)
            self.moved = -1
        # The same group object twice (never in a render) would hide one from `fresh`.
        self._valid = self._valid and not repeated
        ordering = Ordering.presorted(self._members, self._evaluations, excluded, self._ordering)
        self._ordering = ordering
        return ordering

    def _patch(
        self, groups: list[Sequence[CandidateInput]], score: Callable[[CandidateInput], GroupScore]
    ) -> bool:
        """The order of ``groups`` from the last one, looking only at the places whose group
        is another object than last time; False (nothing changed) where that is unsafe."""
        last = self._inputs
        if not self._valid or self._ordering is None or len(last) != len(groups):
            return False
        changed = list(compress(range(len(groups)), map(is_not, groups, last)))
        fresh, places = dict(self._groups), list(self._places)
        removed = [g for g in map(places.__getitem__, changed) if g is not None]
        for gone in removed:
            del fresh[id(gone.group)]
        added: list[_KeptGroup] = []
        for i in changed:
            group = groups[i]
            if not group:
                places[i] = None
                continue
            if id(group) in fresh:
                return False  # one group object at two places: sort everything
            fresh[id(group)] = places[i] = _kept_group(group, score(group[0]))
            added.append(fresh[id(group)])
        moving = sum(len(g.keys) for g in (*added, *removed))
        if moving > max(8, len(self._keys) * self.INSERTS_MAX_SHARE):
            return False
        if not self._move(removed, added):
            return False
        excluded = list(chain.from_iterable(map(attrgetter("excluded"), filter(None, places))))
        self._groups, self._inputs, self._places = fresh, groups, places
        self.removed, self.added, self.moved = removed, added, moving
        self._ordering = Ordering.presorted(
            self._members, self._evaluations, excluded, self._ordering
        )
        return True

    def _move(self, removed: Sequence[_KeptGroup], added: Sequence[_KeptGroup]) -> bool:
        """Take out ``removed``'s members and put in ``added``'s; False if that is unsafe."""
        keys, members = list(self._keys), list(self._members)
        evaluations = list(self._evaluations)
        for group in removed:
            for key in group.keys:
                at = bisect_left(keys, key)
                if at == len(keys) or keys[at] != key:
                    return False
                del keys[at], members[at], evaluations[at]
        for group in added:
            for key, member in zip(group.keys, group.members, strict=True):
                if not _total(key):
                    return False
                at = bisect_left(keys, key)
                if at < len(keys) and keys[at] == key:
                    return False
                keys.insert(at, key)
                members.insert(at, member)
                evaluations.insert(at, group.evaluation)
        self._keys, self._members, self._evaluations = keys, members, evaluations
        return True

    def _sort(self, groups: Iterable[_KeptGroup]) -> None:
        """Sort every group's members afresh, as `Ordering` does (a stable sort)."""
        entries = [
            (key, member, group.evaluation)
            for group in groups
            for key, member in zip(group.keys, group.members, strict=True)
        ]
        order = sorted(range(len(entries)), key=lambda i: entries[i][0])
        self._keys = [entries[i][0] for i in order]
        self._members = [entries[i][1] for i in order]
        self._evaluations = [entries[i][2] for i in order]
        self._valid = _unique(self._keys)
