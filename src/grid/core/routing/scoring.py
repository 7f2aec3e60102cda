"""The scoring engine: six normalised signals, admission, locality tiers, the score.

This module is the one place where a routing candidate is judged, one at a time.
It knows nothing about YAML resources or the CRDT replica: callers (``grid
render`` and the operator's overlay renderer) describe each candidate as a
frozen `CandidateInput` (`grid.core.routing.candidate`), give a `ScoringContext`
describing the gateway's site and the GridNetwork's scoring and admission
settings, and get back an `Evaluation`. Putting the evaluated candidates in
order (the exclusions and the sort) is `grid.core.routing.ranking`, which calls `evaluate`.

The rules are SPEC-DECISIONS §4 and §4a:

* Each signal scores in [0, 1]. A missing signal scores 0.5 (neutral), never 0.
* ``score = Σ wᵢ·sᵢ / Σ wᵢ``; the breakdown holds each ``wᵢ·sᵢ / Σ wᵢ``.
* Admission is ``excluded`` or ``existing_only`` at or above its thresholds.
* With scoring off (``signalTransport.mode: poll``) there is no score.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter, mul

from grid.core.routing.candidate import CandidateInput, Geography, SignalValues
from grid.core.vocabulary import (
    NEUTRAL_SIGNAL_SCORE,
    SIGNAL_NAMES,
    AdmissionState,
    BackendKind,
    CandidateKind,
    ScoreBreakdown,
    SelectionTier,
)

_in_signal_order = attrgetter(*SIGNAL_NAMES)
"""The six signal-named attributes of a record, as a tuple in `SIGNAL_NAMES` order."""


@dataclass(frozen=True)
class ScoringWeights:
    """Weights of the six signals (``GridNetwork.spec.scoring.weights``).

    Defaults are seed 003's table. A weight of 0 removes a signal from the
    blend; the sum must be positive so the score stays a weighted mean.
    """

    locality: float = 3.0
    queue_depth: float = 3.0
    kv_cache: float = 2.0
    prefix_cache: float = 2.0
    latency: float = 2.0
    cost: float = 1.0

    def __post_init__(self) -> None:
        values = self.as_tuple()
        if any(not math.isfinite(w) or w < 0 for w in values):
            raise ValueError("scoring weights must be finite and non-negative")
        if sum(values) <= 0:
            raise ValueError("scoring weights must not all be zero")

    def as_tuple(self) -> tuple[float, ...]:
        """The weights in signal order (`SIGNAL_NAMES`)."""
        return _in_signal_order(self)


@dataclass(frozen=True)
class AdmissionThresholds:
    """Ratios at or above which a candidate enters a restricted admission state.

    ``existing_only_*`` default to 0.85 (queue) and 0.90 (KV cache); ``excluded_*``
    default to 0.98 for both (``GridNetwork.spec.admission``). A missing ratio
    triggers nothing.
    """

    existing_only_queue_depth: float = 0.85
    existing_only_kv_cache: float = 0.90
    excluded_queue_depth: float = 0.98
    excluded_kv_cache: float = 0.98
    missing: AdmissionState | None = None
    """upstream's ``admissionPolicy.missingMetrics``: the state of a self-hosted
    candidate whose pressure ratios (those with a finite existing-only threshold)
    are all missing. ``None`` is §4's rule: a missing ratio triggers nothing."""
    held: frozenset[tuple[str, str]] | None = None
    """Under ``admissionPolicy.mode: stabilized`` in the operator, the
    ``(site, provider)`` groups the hysteresis holds in existing_only; when set, it
    replaces the existing-only thresholds (the excluded ones still apply)."""


@dataclass(frozen=True)
class ScoringConfig:
    """Everything the GridNetwork contributes to scoring.

    ``latency_ceiling_ms`` (default 5000) is the p99 at which the latency signal
    reaches 0; ``cost_ceiling_per_million_input_tokens`` (default 100) is the
    input cost at which the cost signal reaches 0. ``enabled`` is False under
    ``signalTransport.mode: poll``, where local scoring is off.
    """

    weights: ScoringWeights = field(default_factory=ScoringWeights)
    latency_ceiling_ms: float = 5000.0
    cost_ceiling_per_million_input_tokens: float = 100.0
    admission: AdmissionThresholds = field(default_factory=AdmissionThresholds)
    enabled: bool = True

    def __post_init__(self) -> None:
        if not self.latency_ceiling_ms > 0:
            raise ValueError("latencyCeilingMs must be positive")
        if not self.cost_ceiling_per_million_input_tokens > 0:
            raise ValueError("costCeilingPerMillionInputTokens must be positive")


@dataclass(frozen=True)
class ScoringContext:
    """The gateway's point of view: its local site, that site's geography, config."""

    local_site: str
    local_geography: Geography | None
    config: ScoringConfig = field(default_factory=ScoringConfig)


@dataclass(frozen=True)
class SignalScores:
    """Per-signal scores sᵢ in [0, 1]; missing signals are already 0.5 here."""

    locality: float
    queue_depth: float
    kv_cache: float
    prefix_cache: float
    latency: float
    cost: float
    missing: frozenset[str] = frozenset()

    def as_tuple(self) -> tuple[float, ...]:
        """The scores in signal order (`SIGNAL_NAMES`)."""
        return _in_signal_order(self)


@dataclass(frozen=True)
class Evaluation:
    """Everything the engine derived about one candidate, before ranking."""

    candidate: CandidateInput
    signal_scores: SignalScores
    admission: AdmissionState
    tier: SelectionTier
    score: float | None
    breakdown: ScoreBreakdown | None

    def for_candidate(self, candidate: CandidateInput) -> Evaluation:
        """This evaluation as ``candidate``'s own; ``self`` when it already is.

        ``candidate`` must be equivalent to ``self.candidate`` (same site,
        backend kind, geography and signals), so every derived field holds for
        it too: ranking evaluates each provider once and shares the result
        among its models this way (`grid.core.routing.ranking.order_candidates`).
        """
        if self.candidate is candidate:
            return self
        return Evaluation(
            candidate, self.signal_scores, self.admission, self.tier, self.score, self.breakdown
        )


def locality_score(candidate: CandidateInput, context: ScoringContext) -> float | None:
    """The locality signal of §4a, or ``None`` (missing) for an unknown region.

    Self-hosted capacity at the gateway's own site scores 1.0; at another site
    0.7 in the same region and 0.4 in another, and missing when either region
    is unknown. ``cloud_managed`` scores 0.2 and ``api_provider`` 0.1 anywhere.
    """
    if candidate.backend_kind is BackendKind.CLOUD_MANAGED:
        return 0.2
    if candidate.backend_kind is BackendKind.API_PROVIDER:
        return 0.1
    if candidate.site == context.local_site:
        return 1.0
    here = context.local_geography.region if context.local_geography else None
    there = candidate.geography.region if candidate.geography else None
    if here is None or there is None:
        return None
    return 0.7 if here == there else 0.4


def selection_tier(candidate: CandidateInput, context: ScoringContext) -> SelectionTier:
    """The tier of the candidate's site relative to the gateway's site.

    Same site first; then the same region and zone; then the same region.
    Anything else, including unknown geography, is ``cross_region``.
    """
    if candidate.site == context.local_site:
        return SelectionTier.SAME_SITE
    here, there = context.local_geography, candidate.geography
    if here is None or there is None or here.region is None or there.region is None:
        return SelectionTier.CROSS_REGION
    if here.region != there.region:
        return SelectionTier.CROSS_REGION
    if here.zone is not None and here.zone == there.zone:
        return SelectionTier.SAME_ZONE
    return SelectionTier.SAME_REGION


def admission_state(signals: SignalValues, thresholds: AdmissionThresholds) -> AdmissionState:
    """Admission from the queue-depth and KV-cache ratios; at or above triggers."""
    queue, kv = signals.queue_depth, signals.kv_cache_utilization
    if (queue is not None and queue >= thresholds.excluded_queue_depth) or (
        kv is not None and kv >= thresholds.excluded_kv_cache
    ):
        return AdmissionState.EXCLUDED
    if (queue is not None and queue >= thresholds.existing_only_queue_depth) or (
        kv is not None and kv >= thresholds.existing_only_kv_cache
    ):
        return AdmissionState.EXISTING_ONLY
    return AdmissionState.NEW_AND_EXISTING


def pressure_missing(signals: SignalValues, thresholds: AdmissionThresholds) -> bool:
    """Whether every pressure ratio (a finite existing-only threshold) is missing."""
    watched = [
        value
        for value, limit in (
            (signals.queue_depth, thresholds.existing_only_queue_depth),
            (signals.kv_cache_utilization, thresholds.existing_only_kv_cache),
        )
        if math.isfinite(limit)
    ]
    return bool(watched) and all(value is None for value in watched)


def candidate_admission(
    candidate: CandidateInput, thresholds: AdmissionThresholds
) -> AdmissionState:
    """`admission_state`, with upstream's missing-metrics rule and stabilized hold."""
    state = admission_state(candidate.signals, thresholds)
    if thresholds.missing is None and thresholds.held is None:
        return state  # §4 alone: the common case
    if state is AdmissionState.EXCLUDED:
        return state
    if (
        thresholds.missing is not None
        and candidate.backend_kind.self_hosted
        and candidate.kind == CandidateKind.INFERENCE_MODEL  # tools and agents publish no pressure
        and pressure_missing(candidate.signals, thresholds)
    ):
        return thresholds.missing
    if thresholds.held is not None:
        held = (candidate.site, candidate.provider) in thresholds.held
        return AdmissionState.EXISTING_ONLY if held else AdmissionState.NEW_AND_EXISTING
    return state


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def _low_is_good(value: float | None) -> float | None:
    """``1 - clamp(ratio)``: an idle queue or an empty KV cache scores 1."""
    return None if value is None else 1.0 - _clamp(value)


def _high_is_good(value: float | None) -> float | None:
    """``clamp(ratio)``: a prefix-cache hit ratio of 1 scores 1."""
    return None if value is None else _clamp(value)


def _under_ceiling(value: float | None, ceiling: float) -> float | None:
    """``1 - min(1, max(0, v) / ceiling)``: 0 scores 1, the ceiling and above 0."""
    return None if value is None else 1.0 - min(1.0, max(0.0, value) / ceiling)


_SignalRule = Callable[[CandidateInput, ScoringContext], float | None]

_SIGNAL_RULES: tuple[tuple[str, _SignalRule], ...] = (
    ("locality", locality_score),
    ("queue_depth", lambda c, _: _low_is_good(c.signals.queue_depth)),
    ("kv_cache", lambda c, _: _low_is_good(c.signals.kv_cache_utilization)),
    ("prefix_cache", lambda c, _: _high_is_good(c.signals.prefix_cache_hit_ratio)),
    (
        "latency",
        lambda c, x: _under_ceiling(c.signals.p99_latency_ms, x.config.latency_ceiling_ms),
    ),
    (
        "cost",
        lambda c, x: _under_ceiling(
            c.signals.cost_per_million_input_tokens,
            x.config.cost_ceiling_per_million_input_tokens,
        ),
    ),
)
"""Each signal (in `SIGNAL_NAMES` order) and the rule scoring it, ``None`` when missing."""


_NONE_MISSING: frozenset[str] = frozenset()
"""Shared by every complete set of signals (an empty frozenset is not a singleton)."""


def signal_scores(candidate: CandidateInput, context: ScoringContext) -> SignalScores:
    """Normalise the six signals to [0, 1] by `_SIGNAL_RULES`, 0.5 for missing ones."""
    raw = [rule(candidate, context) for _, rule in _SIGNAL_RULES]
    missing = _NONE_MISSING
    if None in raw:
        missing = frozenset(n for (n, _), v in zip(_SIGNAL_RULES, raw, strict=True) if v is None)
    locality, queue, kv, prefix, latency, cost = [
        NEUTRAL_SIGNAL_SCORE if v is None else v for v in raw
    ]
    return SignalScores(locality, queue, kv, prefix, latency, cost, missing)


def blend(scores: SignalScores, weights: ScoringWeights) -> ScoreBreakdown:
    """The weighted mean Σwᵢsᵢ/Σwᵢ with each contribution wᵢsᵢ/Σwᵢ."""
    w = weights.as_tuple()
    d = sum(w)
    parts = list(map(mul, w, scores.as_tuple()))
    locality, queue, kv, prefix, latency, cost = [part / d for part in parts]
    return ScoreBreakdown(locality, queue, kv, prefix, latency, cost, sum(parts) / d)


def evaluate(candidate: CandidateInput, context: ScoringContext) -> Evaluation:
    """Derive signal scores, admission, tier and (when enabled) the score."""
    config = context.config
    scores = signal_scores(candidate, context)
    breakdown = blend(scores, config.weights) if config.enabled else None
    return Evaluation(
        candidate=candidate,
        signal_scores=scores,
        admission=candidate_admission(candidate, config.admission),
        tier=selection_tier(candidate, context),
        score=breakdown.total if breakdown else None,
        breakdown=breakdown,
    )
