"""Ranking: the §4 sort over evaluated candidates, and the exclusions before it.

`grid.core.routing.scoring` judges one candidate at a time (signal scores, admission,
locality tier, the blended score). This module turns a set of those judgements
into an order: it drops unhealthy and admission-``excluded`` candidates, sorts
the survivors and numbers them. It is separate because the order is a property
of the whole set, not of one candidate. Renders rank thousands of candidates, so
one evaluation is shared by every model of a provider and the ranked records
are built only as far as a caller reads them (see `order_candidates`).

The sort is admission, tier, score (descending), freshness (fresh first, then
the newer ``observed_at``; no sample is oldest), then ``(site, name, cluster)``.
With scoring off (``signalTransport.mode: poll``) there is no score and the
score key is skipped in the sort.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cached_property

from grid.core.routing.scoring import (
    AdmissionState,
    BackendKind,
    CandidateInput,
    Evaluation,
    ScoringContext,
    SelectionTier,
    evaluate,
)


class ExclusionReason(StrEnum):
    """Why the scoring engine removed a candidate from the overlay."""

    UNHEALTHY = "unhealthy"
    ADMISSION_EXCLUDED = "admission_excluded"


_ADMISSION_ORDER = {
    AdmissionState.NEW_AND_EXISTING: 0,
    AdmissionState.EXISTING_ONLY: 1,
    AdmissionState.EXCLUDED: 2,
}
_TIER_ORDER = {
    SelectionTier.SAME_SITE: 0,
    SelectionTier.SAME_ZONE: 1,
    SelectionTier.SAME_REGION: 2,
    SelectionTier.CROSS_REGION: 3,
}


@dataclass(frozen=True)
class RankedCandidate:
    """An evaluation with its position in the overlay (0 is the top)."""

    evaluation: Evaluation
    rank: int


@dataclass(frozen=True)
class Exclusion:
    """An evaluated candidate that the engine removed, and why."""

    evaluation: Evaluation
    reason: ExclusionReason


@dataclass(frozen=True)
class Ranking:
    """The result of scoring: ranked survivors and the excluded candidates."""

    ranked: tuple[RankedCandidate, ...]
    excluded: tuple[Exclusion, ...]


SortKey = tuple[int, int, float, int, int, float, str, str, str]

_EvaluationKey = tuple[int, int, float]
"""The part of a `SortKey` an `Evaluation` decides: admission, tier, score."""

_CandidateKey = tuple[int, int, float, str, str, str]
"""The part of a `SortKey` a `CandidateInput` decides: freshness, sample, identity."""


def _evaluation_key(evaluation: Evaluation) -> _EvaluationKey:
    """Admission, tier and score (descending; a constant with scoring off)."""
    score = evaluation.score
    return (
        _ADMISSION_ORDER[evaluation.admission],
        _TIER_ORDER[evaluation.tier],
        -score if score is not None else 0.0,
    )


def _candidate_key(candidate: CandidateInput) -> _CandidateKey:
    """Fresh first, then the newer sample (none is oldest), then the tie-break."""
    observed = candidate.observed_at
    return (
        0 if candidate.fresh else 1,
        0 if observed is not None else 1,
        -observed.timestamp() if observed is not None else 0.0,
        candidate.site,
        candidate.name,
        candidate.cluster,
    )


def sort_key(evaluation: Evaluation) -> SortKey:
    """The §4 order: admission, tier, score desc, fresh, newer sample, tie-break.

    With scoring off the score component is a constant, so it never decides.
    A candidate without ``observed_at`` sorts after every candidate that has one.
    """
    return _evaluation_key(evaluation) + _candidate_key(evaluation.candidate)


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
        keys: list[SortKey],
        excluded: list[tuple[CandidateInput, Evaluation, ExclusionReason]],
    ) -> None:
        """``kept[i]`` is ranked by ``keys[i]`` and shares ``evaluations[i]``."""
        self._kept = kept
        self._evaluations = evaluations
        self._order = sorted(range(len(keys)), key=keys.__getitem__)  # stable
        self._excluded = excluded
        self._ranked: list[RankedCandidate] = []

    def __len__(self) -> int:
        """How many candidates are ranked (excluded ones not counted)."""
        return len(self._order)

    def top(self, n: int | None = None) -> tuple[RankedCandidate, ...]:
        """The first ``n`` ranked candidates (all of them when ``None``)."""
        stop = len(self._order) if n is None else max(0, min(n, len(self._order)))
        ranked, kept, evaluations, order = self._ranked, self._kept, self._evaluations, self._order
        for position in range(len(ranked), stop):
            index = order[position]
            evaluation = evaluations[index].for_candidate(kept[index])
            ranked.append(RankedCandidate(evaluation, position))
        return tuple(ranked[:stop])

    @cached_property
    def ranking(self) -> Ranking:
        """Every ranked candidate and every exclusion."""
        excluded = tuple(
            Exclusion(shared.for_candidate(candidate), reason)
            for candidate, shared, reason in self._excluded
        )
        return Ranking(ranked=self.top(), excluded=excluded)


def rank(evaluations: Iterable[Evaluation]) -> tuple[RankedCandidate, ...]:
    """Sort evaluations by `sort_key` and number them 0..n-1."""
    listed = list(evaluations)
    candidates = [e.candidate for e in listed]
    return Ordering(candidates, listed, [sort_key(e) for e in listed], []).top()


def score_candidates(candidates: Sequence[CandidateInput], context: ScoringContext) -> Ranking:
    """Evaluate, exclude (unhealthy, then admission ``excluded``) and rank."""
    return order_candidates(candidates, context).ranking


def order_candidates(candidates: Sequence[CandidateInput], context: ScoringContext) -> Ordering:
    """`score_candidates`, with the records built on demand (see `Ordering`).

    The result is exactly `evaluate` of each candidate and `rank` of the
    survivors. An evaluation depends only on the candidate's site, backend
    kind, geography and signals, which every model of one provider shares, so
    it (and its part of the sort key) is computed once per such group: a
    renderer passes one geography and one signals instance per provider, and
    equal values in distinct objects merely miss this per-call cache. The
    candidates keep those objects alive for the whole call, so no id is reused.
    Consecutive candidates of one group (a provider's models) skip the lookup.
    """
    shared: dict[tuple[str, BackendKind, int, int], tuple[Evaluation, _EvaluationKey]] = {}
    kept: list[CandidateInput] = []
    evaluations: list[Evaluation] = []
    keys: list[SortKey] = []
    excluded: list[tuple[CandidateInput, Evaluation, ExclusionReason]] = []
    last: CandidateInput | None = None
    evaluation: Evaluation | None = None
    admission, tier, score = 0, 0, 0.0
    last_observed: datetime | None = None
    age = 0.0
    for candidate in candidates:
        if not (
            last is not None
            and candidate.signals is last.signals
            and candidate.geography is last.geography
            and candidate.backend_kind is last.backend_kind
            and candidate.site == last.site
        ):
            group = (
                candidate.site,
                candidate.backend_kind,
                id(candidate.geography),
                id(candidate.signals),
            )
            known = shared.get(group)
            if known is None:
                first = evaluate(candidate, context)
                known = shared[group] = (first, _evaluation_key(first))
            evaluation, (admission, tier, score) = known
            last = candidate
        assert evaluation is not None
        if not candidate.healthy:
            excluded.append((candidate, evaluation, ExclusionReason.UNHEALTHY))
        elif evaluation.admission is AdmissionState.EXCLUDED:
            excluded.append((candidate, evaluation, ExclusionReason.ADMISSION_EXCLUDED))
        else:
            kept.append(candidate)
            evaluations.append(evaluation)
            # _evaluation_key(evaluation) + _candidate_key(candidate), inline: per candidate.
            observed = candidate.observed_at
            if observed is not last_observed:  # a provider's models share one sample
                last_observed = observed
                age = -observed.timestamp() if observed is not None else 0.0
            keys.append(
                (
                    admission,
                    tier,
                    score,
                    0 if candidate.fresh else 1,
                    0 if observed is not None else 1,
                    age,
                    candidate.site,
                    candidate.name,
                    candidate.cluster,
                )
            )
    return Ordering(kept, evaluations, keys, excluded)
