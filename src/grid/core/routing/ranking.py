"""Ranking: the §4 sort over evaluated candidates, and the exclusions before it.

`grid.core.routing.scoring` judges one candidate at a time (signal scores, admission,
locality tier, the blended score). This module turns a set of those judgements
into an order: it drops unhealthy and admission-``excluded`` candidates, sorts
the survivors and numbers them. It is separate because the order is a property
of the whole set, not of one candidate. Renders rank thousands of candidates, so
candidates come in groups (one provider's models, as `candidate_draft` drafts
them), each group is evaluated once, and the ranked records are built only as
far as a caller reads them (see `order_candidates`).

The sort is admission, tier, score (descending), freshness (fresh first, then
the newer ``observed_at``; no sample is oldest), then ``(site, name, cluster)``.
With scoring off (``signalTransport.mode: poll``) there is no score and the
score key is skipped in the sort.

Under ``routingPolicy: scoreFirst`` the sort puts the selection group key
first (admission, then freshness) and then the rest of that order (tier,
score, the newer sample, the tie-break), so the candidates of one group are
contiguous (`grid.core.routing.groups`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import compress
from operator import and_, is_, not_

from grid.core.routing.candidate import CandidateInput, ExclusionReason
from grid.core.routing.scoring import Evaluation, ScoringContext, evaluate, pressure_missing
from grid.core.vocabulary import ADMISSION_ORDER, TIER_ORDER, AdmissionState, RoutingPolicy


@dataclass(frozen=True)
class RankedCandidate:
    """An evaluation with its position in the overlay (0 is the top)."""

    evaluation: Evaluation
    rank: int


@dataclass(frozen=True)
class ExcludedCandidate:
    """An evaluated candidate that ranking removed, and why.

    ``reason`` is ``unhealthy`` or ``admission_excluded``.
    """

    evaluation: Evaluation
    reason: ExclusionReason


@dataclass(frozen=True)
class Ranking:
    """The result of scoring: ranked survivors and the excluded candidates."""

    ranked: tuple[RankedCandidate, ...]
    excluded: tuple[ExcludedCandidate, ...]


SortKey = tuple[float | str, ...]
"""Under ``geographyFirst``: admission, tier, score, freshness, has-sample, sample age,
site, name, cluster. Under ``scoreFirst`` freshness moves to second place."""

_EvaluationKey = tuple[int, int, float]
"""The part of a `SortKey` an `Evaluation` decides: admission, tier, score."""

_SampleKey = tuple[int, int, float, str]
"""The part of a `SortKey` a provider's sample decides: freshness, its age, the site."""


def _evaluation_key(evaluation: Evaluation) -> _EvaluationKey:
    """Admission, tier and score (descending; a constant with scoring off)."""
    score = evaluation.score
    return (
        ADMISSION_ORDER[evaluation.admission],
        TIER_ORDER[evaluation.tier],
        -score if score is not None else 0.0,
    )


def _sample_key(candidate: CandidateInput) -> _SampleKey:
    """Fresh first, then the newer sample (none is oldest), then the site."""
    observed = candidate.observed_at
    return (
        0 if candidate.fresh else 1,
        0 if observed is not None else 1,
        -observed.timestamp() if observed is not None else 0.0,
        candidate.site,
    )


def _policy_order(key: tuple[float | str, ...], policy: RoutingPolicy) -> tuple[float | str, ...]:
    """``key`` (admission, tier, score, fresh, ...) in ``policy``'s order."""
    if policy is RoutingPolicy.SCORE_FIRST:
        return (key[0], key[3], key[1], key[2], *key[4:])
    return key


def sort_key(
    evaluation: Evaluation, policy: RoutingPolicy = RoutingPolicy.GEOGRAPHY_FIRST
) -> SortKey:
    """The §4 order: admission, tier, score desc, fresh, newer sample, tie-break.

    With scoring off the score component is a constant, so it never decides.
    A candidate without ``observed_at`` sorts after every candidate that has one.
    Under ``scoreFirst`` freshness comes second (the module docstring).
    """
    candidate = evaluation.candidate
    key = _evaluation_key(evaluation) + _sample_key(candidate) + (candidate.name, candidate.cluster)
    return _policy_order(key, policy)


class Ordering:
    """Scored candidates in rank order, turned into records only when asked for.

    `score_candidates` is ``order_candidates(...).ranking``. A renderer that
    emits only the top ``n`` calls `top`, so the records of candidates past its
    limit are built only if something (``grid explain``) later reads `ranking`;
    both return the same record objects.
    """

    def __init__(
        self,
        kept: list[CandidateInput],
        evaluations: list[Evaluation],
        keys: list[SortKey] | None,
        excluded: list[tuple[CandidateInput, Evaluation, ExclusionReason]],
        previous: Ordering | None = None,
    ) -> None:
        """``kept[i]`` is ranked by ``keys[i]`` and shares ``evaluations[i]``.

        ``keys`` None: ``kept`` is in rank order already (`presorted`).
        """
        self._kept = kept
        self._evaluations = evaluations
        self._order: Sequence[int] = (
            range(len(kept)) if keys is None else sorted(range(len(keys)), key=keys.__getitem__)
        )  # stable
        self._excluded = excluded
        self._ranked: list[RankedCandidate] = []
        self._previous: tuple[list[CandidateInput], list[Evaluation], list[RankedCandidate]]
        self._previous = ([], [], [])
        if previous is not None and keys is None and previous.in_rank_order:
            self._previous = (previous._kept, previous._evaluations, previous._ranked)

    @classmethod
    def presorted(
        cls,
        kept: list[CandidateInput],
        evaluations: list[Evaluation],
        excluded: list[tuple[CandidateInput, Evaluation, ExclusionReason]],
        previous: Ordering | None = None,
    ) -> Ordering:
        """Candidates already in rank order (`grid.core.routing.order_cache`).

        A record of ``previous`` (an ordering in rank order too) is reused where
        the same candidate sits at the same place with the same evaluation.
        """
        return cls(kept, evaluations, None, excluded, previous)

    @property
    def in_rank_order(self) -> bool:
        """Whether the candidates were given in rank order (`presorted`)."""
        return isinstance(self._order, range)

    def __len__(self) -> int:
        """How many candidates are ranked (excluded ones not counted)."""
        return len(self._order)

    def top(self, n: int | None = None) -> tuple[RankedCandidate, ...]:
        """The first ``n`` ranked candidates (all of them when ``None``)."""
        stop = len(self._order) if n is None else max(0, min(n, len(self._order)))
        ranked, kept, evaluations, order = self._ranked, self._kept, self._evaluations, self._order
        if len(ranked) < stop:
            self._reuse(stop)
        for position in range(len(ranked), stop):
            index = order[position]
            ranked.append(RankedCandidate(evaluations[index].for_candidate(kept[index]), position))
        if len(ranked) == len(order):
            self._previous = ([], [], [])
        return tuple(ranked[:stop])

    def _reuse(self, stop: int) -> None:
        """Add the records up to ``stop`` that `previous` holds at their places.

        A record is reused where the same candidate sits at the same place with
        the same evaluation; the places are compared all at once, and only the
        others get a new record. Stops at the first place past the previous order.
        """
        ranked, kept, evaluations = self._ranked, self._kept, self._evaluations
        was_kept, was_evaluated, was_ranked = self._previous
        start, end = len(ranked), min(len(was_ranked), len(was_kept), stop)
        if start >= end or not self.in_rank_order:
            return  # `previous` is only kept for an order of its own in rank order
        held = map(
            and_,
            map(is_, was_kept[start:end], kept[start:end]),
            map(is_, was_evaluated[start:end], evaluations[start:end]),
        )
        part = was_ranked[start:end]
        for offset in compress(range(end - start), map(not_, held)):
            position = start + offset
            part[offset] = RankedCandidate(
                evaluations[position].for_candidate(kept[position]), position
            )
        ranked.extend(part)

    @cached_property
    def ranking(self) -> Ranking:
        """Every ranked candidate and every exclusion."""
        excluded = tuple(
            ExcludedCandidate(shared.for_candidate(candidate), reason)
            for candidate, shared, reason in self._excluded
        )
        return Ranking(ranked=self.top(), excluded=excluded)


def rank(
    evaluations: Iterable[Evaluation], policy: RoutingPolicy = RoutingPolicy.GEOGRAPHY_FIRST
) -> tuple[RankedCandidate, ...]:
    """Sort evaluations by `sort_key` and number them 0..n-1."""
    listed = list(evaluations)
    candidates = [e.candidate for e in listed]
    return Ordering(candidates, listed, [sort_key(e, policy) for e in listed], []).top()


def score_candidates(
    candidates: Sequence[CandidateInput],
    context: ScoringContext,
    policy: RoutingPolicy = RoutingPolicy.GEOGRAPHY_FIRST,
) -> Ranking:
    """Evaluate each candidate, exclude (unhealthy, then admission ``excluded``) and rank."""
    return order_candidates([(candidate,) for candidate in candidates], context, policy).ranking


GroupScore = tuple[Evaluation, tuple[float | str, ...]]
"""A group's shared evaluation and its part of the sort key (all but name and cluster)."""


def group_score(
    candidate: CandidateInput, context: ScoringContext, policy: RoutingPolicy
) -> GroupScore:
    """The evaluation of a group's first candidate and the sort key part it shares."""
    evaluation = evaluate(candidate, context)
    return evaluation, _policy_order(_evaluation_key(evaluation) + _sample_key(candidate), policy)


def exclusion(candidate: CandidateInput, evaluation: Evaluation) -> ExclusionReason | None:
    """Why ``candidate`` (evaluated as ``evaluation``) is left out of the ranking, or None."""
    if not candidate.healthy:
        return ExclusionReason.UNHEALTHY
    if evaluation.admission is AdmissionState.EXCLUDED:
        return ExclusionReason.ADMISSION_EXCLUDED
    return None


def order_candidates(
    groups: Iterable[Sequence[CandidateInput]],
    context: ScoringContext,
    policy: RoutingPolicy = RoutingPolicy.GEOGRAPHY_FIRST,
    score: Callable[[CandidateInput], GroupScore] | None = None,
) -> Ordering:
    """`score_candidates` over groups of candidates, records built on demand (`Ordering`).

    The candidates of one group differ in their model name only (one provider's
    models, as `grid.core.routing.candidate.provider_candidates` makes them), so
    each group is evaluated once, its part of the sort key is computed once,
    and every member shares both. Within that contract the result is exactly
    `evaluate` of each candidate and `rank` of the survivors. ``score`` stands
    in for `group_score` under ``context`` and ``policy`` (a render cache's,
    `grid.core.routing.render_cache`), and must answer what it would.
    """
    kept: list[CandidateInput] = []
    evaluations: list[Evaluation] = []
    keys: list[SortKey] = []
    excluded: list[tuple[CandidateInput, Evaluation, ExclusionReason]] = []
    for group in groups:
        if not group:
            continue
        if score is None:
            evaluation, shared_key = group_score(group[0], context, policy)
        else:
            evaluation, shared_key = score(group[0])
        for candidate in group:
            reason = exclusion(candidate, evaluation)
            if reason is not None:
                excluded.append((candidate, evaluation, reason))
            else:
                kept.append(candidate)
                evaluations.append(evaluation)
                keys.append((*shared_key, candidate.name, candidate.cluster))
    return Ordering(kept, evaluations, keys, excluded)


def exclusion_detail(evaluation: Evaluation, context: ScoringContext) -> str:
    """Why ranking excluded ``evaluation`` (unhealthy, or admission ``excluded``), in words."""
    candidate = evaluation.candidate
    if not candidate.healthy:
        return "the signals report healthy: false"
    limits = context.config.admission
    queue, kv = candidate.signals.queue_depth, candidate.signals.kv_cache_utilization
    if limits.missing is AdmissionState.EXCLUDED and pressure_missing(candidate.signals, limits):
        return "pressure signal missing (admissionPolicy.missingMetrics: excluded)"
    if queue is not None and queue >= limits.excluded_queue_depth:
        return f"queue_depth {queue:g} >= excluded threshold {limits.excluded_queue_depth:g}"
    return f"kv_cache_utilization {kv or 0:g} >= excluded threshold {limits.excluded_kv_cache:g}"
