"""Selection groups: which candidates of one model a gateway treats as equivalent (§14).

Ranking says which providers are preferred; a group says which of them are
interchangeable, so a gateway can spread new requests over the group instead
of sending every one to rank 0. After the sort (`grid.core.routing.ranking`),
contiguous candidates of one ``(kind, name)`` whose group key is equal share a
``selection_group``, numbered from 0 per ``(kind, name)`` in overlay order.

The group key depends on ``GridNetwork.spec.routingPolicy``:

* ``geographyFirst`` (the default): admission, tier and freshness, so a remote
  provider is only ever a fallback for a local one;
* ``scoreFirst``: admission and freshness, so eligible providers of every site
  share the active group. Ranking then sorts by this key first (admission,
  freshness, then §4's tier, score, sample age and tie-break), which keeps
  equal keys together.

Scores never split a group: they only order it. Because the numbering reads
nothing but the sorted order, and the sort is total, groups are the same under
any permutation of the inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from grid.core.routing.scoring import Evaluation
from grid.core.vocabulary import AdmissionState, RoutingPolicy, SelectionTier

__all__ = ["GroupKey", "Grouped", "assign_groups", "group_boundary", "group_key"]

GroupKey = tuple[str, ...]
"""The wire names of the fields that make two candidates equivalent."""


_WIRE_NAMES: dict[AdmissionState | SelectionTier, str] = {
    member: member.value for enum in (AdmissionState, SelectionTier) for member in enum
}
"""Each state's wire name; a dict lookup is several times cheaper than ``.value``."""


class Grouped(Protocol):
    """A ranked candidate as grouping reads it (`RankedCandidate` fits)."""

    @property
    def evaluation(self) -> Evaluation: ...


def group_key(evaluation: Evaluation, policy: RoutingPolicy) -> GroupKey:
    """Admission, tier and freshness (``geographyFirst``), or admission and freshness."""
    fresh = "fresh" if evaluation.candidate.fresh else "not fresh"
    if policy is RoutingPolicy.SCORE_FIRST:
        return (_WIRE_NAMES[evaluation.admission], fresh)
    return (_WIRE_NAMES[evaluation.admission], _WIRE_NAMES[evaluation.tier], fresh)


def assign_groups(ranked: Iterable[Grouped], policy: RoutingPolicy) -> tuple[int, ...]:
    """Each candidate's ``selection_group``, in the order given (the overlay's).

    A candidate starts a new group when its group key differs from that of the
    previous candidate of the same ``(kind, name)``; the first of each
    ``(kind, name)`` is group 0. (The key is compared as its states and
    freshness, which are equal exactly when their wire names are: `group_key`.)
    """
    score_first = policy is RoutingPolicy.SCORE_FIRST
    last: dict[tuple[str, str], tuple[tuple[object, ...], int]] = {}
    groups: list[int] = []
    for item in ranked:
        evaluation = item.evaluation
        candidate = evaluation.candidate
        model = (candidate.kind, candidate.name)
        if score_first:
            key: tuple[object, ...] = (evaluation.admission, bool(candidate.fresh))
        else:
            key = (evaluation.admission, evaluation.tier, bool(candidate.fresh))
        previous = last.get(model)
        group = 0
        if previous is not None:
            group = previous[1] if previous[0] == key else previous[1] + 1
        last[model] = (key, group)
        groups.append(group)
    return tuple(groups)


_FIELDS = {
    RoutingPolicy.GEOGRAPHY_FIRST: ("admission", "tier", "freshness"),
    RoutingPolicy.SCORE_FIRST: ("admission", "freshness"),
}


def group_boundary(
    groups: Sequence[int],
    evaluations: Sequence[Evaluation],
    index: int,
    policy: RoutingPolicy,
) -> str:
    """Why candidate ``index`` is in its group, for ``grid explain``.

    ``groups`` and ``evaluations`` are one model's candidates in overlay order.
    A candidate that opens a group names the first group-key field that differs
    from the previous group, as in "group 1: tier same_region differs from
    group 0's same_zone"; any other names the group it shares.
    """
    group = groups[index]
    fields = _FIELDS[policy]
    if index == 0:
        return f"group {group}: the first group for this model (by {', '.join(fields)})"
    if groups[index - 1] == group:
        return f"group {group}: same {', '.join(fields)} as the candidate above ({policy.value})"
    mine = group_key(evaluations[index], policy)
    theirs = group_key(evaluations[index - 1], policy)
    field, value, other = next(
        (f, a, b) for f, a, b in zip(fields, mine, theirs, strict=True) if a != b
    )
    return f"group {group}: {field} {value} differs from group {groups[index - 1]}'s {other}"
