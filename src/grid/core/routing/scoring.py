"""The scoring engine: six normalised signals, admission, locality tiers, the score.

This module is the one place where a routing candidate is judged, one at a time.
It knows nothing about YAML resources or the CRDT replica: callers (``grid
render`` and the operator's overlay renderer) describe each candidate as a
frozen `CandidateInput`, give a `ScoringContext` describing the gateway's site
and the GridNetwork's scoring and admission settings, and get back an
`Evaluation`. Putting the evaluated candidates in order (the exclusions and the
sort) is `grid.core.routing.ranking`, which calls `evaluate`.

The rules are SPEC-DECISIONS §4 and §4a:

* Each signal scores in [0, 1]. A missing signal scores 0.5 (neutral), never 0.
* ``score = Σ wᵢ·sᵢ / Σ wᵢ``; the breakdown holds each ``wᵢ·sᵢ / Σ wᵢ``.
* Admission is ``excluded`` or ``existing_only`` at or above its thresholds.
* With scoring off (``signalTransport.mode: poll``) there is no score.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

NEUTRAL_SIGNAL_SCORE = 0.5
"""The score of a missing signal: neutral, so absence neither helps nor hurts."""


class BackendKind(StrEnum):
    """Where an inference backend runs (InferenceProvider ``spec.backendKind``)."""

    LOCAL = "local"
    REMOTE = "remote"
    CLOUD_MANAGED = "cloud_managed"
    API_PROVIDER = "api_provider"

    @property
    def self_hosted(self) -> bool:
        """True for capacity a Grid site runs itself (``local`` or ``remote``)."""
        return self in (BackendKind.LOCAL, BackendKind.REMOTE)


class AdmissionState(StrEnum):
    """Whether a candidate may take new sessions, only existing ones, or none."""

    NEW_AND_EXISTING = "new_and_existing"
    EXISTING_ONLY = "existing_only"
    EXCLUDED = "excluded"


class SelectionTier(StrEnum):
    """The locality tier of a candidate relative to the gateway's local site."""

    SAME_SITE = "same_site"
    SAME_ZONE = "same_zone"
    SAME_REGION = "same_region"
    CROSS_REGION = "cross_region"


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

    def as_tuple(self) -> tuple[float, float, float, float, float, float]:
        """The weights in signal order: locality, queue, kv, prefix, latency, cost."""
        return (
            self.locality,
            self.queue_depth,
            self.kv_cache,
            self.prefix_cache,
            self.latency,
            self.cost,
        )


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
class Geography:
    """A GridSite's region and zone; ``None`` means unknown."""

    region: str | None = None
    zone: str | None = None


@dataclass(frozen=True)
class SignalValues:
    """Raw observed signals of one provider; ``None`` means missing, never zero.

    ``queue_depth``, ``kv_cache_utilization`` and ``prefix_cache_hit_ratio`` are
    ratios in [0, 1]; ``p99_latency_ms`` and ``cost_per_million_input_tokens``
    are non-negative.
    """

    queue_depth: float | None = None
    kv_cache_utilization: float | None = None
    prefix_cache_hit_ratio: float | None = None
    p99_latency_ms: float | None = None
    cost_per_million_input_tokens: float | None = None


@dataclass(frozen=True)
class CredentialRef:
    """A reference to the Secret key Praxis injects; never the token itself."""

    strategy: str
    secret_name: str
    secret_namespace: str
    secret_key: str


@dataclass(frozen=True)
class CandidateInput:
    """One routable (provider, model) pair, as the scoring engine sees it.

    ``name`` is the model, ``site`` the provider's site, ``cluster`` its routing
    identity and ``provider`` the InferenceProvider name (used in explanations).
    ``geography`` is the provider site's GridSite geography, ``None`` when the
    site is unknown. ``credential`` is carried through untouched to the overlay.
    """

    name: str
    site: str
    cluster: str
    provider: str
    backend_kind: BackendKind
    signals: SignalValues = field(default_factory=SignalValues)
    geography: Geography | None = None
    healthy: bool = True
    fresh: bool = True
    observed_at: datetime | None = None
    credential: CredentialRef | None = None
    kind: str = "inference_model"


_T = TypeVar("_T")


def _built(cls: type[_T], state: dict[str, Any]) -> _T:
    """An instance of frozen dataclass ``cls`` holding ``state``, without ``__init__``.

    Only for this module's frozen dataclasses, which have no ``__post_init__``,
    no ``InitVar`` and no ``__slots__``: for them the result is exactly
    ``cls(**state)`` when ``state`` names every field. Renders build thousands
    of candidates, evaluations and ranked entries; the frozen ``__init__`` (one
    ``object.__setattr__`` per field) costs several times more.
    """
    instance = object.__new__(cls)
    object.__setattr__(instance, "__dict__", state)
    return instance


def with_cost(values: SignalValues, cost: float | None) -> SignalValues:
    """``values`` with a missing input cost taken from ``cost`` (a provider's spec).

    ``values`` itself when it has a cost or ``cost`` is ``None``; otherwise the
    same as ``dataclasses.replace(values, cost_per_million_input_tokens=cost)``.
    """
    if cost is None or values.cost_per_million_input_tokens is not None:
        return values
    state = dict(vars(values))
    state["cost_per_million_input_tokens"] = cost
    return _built(SignalValues, state)


def provider_candidates(
    models: Iterable[str],
    *,
    site: str,
    cluster: str,
    provider: str,
    backend_kind: BackendKind,
    signals: SignalValues,
    geography: Geography | None,
    healthy: bool,
    fresh: bool,
    observed_at: datetime | None,
    credential: CredentialRef | None,
    kind: str = "inference_model",
) -> tuple[CandidateInput, ...]:
    """``CandidateInput(name=model, ...)`` for each model, sharing every other field.

    The same values as calling the constructor per model, built without the
    frozen ``__init__`` (see `_built`): a render builds one per (provider, model).
    """
    state = {
        "name": "",
        "site": site,
        "cluster": cluster,
        "provider": provider,
        "backend_kind": backend_kind,
        "signals": signals,
        "geography": geography,
        "healthy": healthy,
        "fresh": fresh,
        "observed_at": observed_at,
        "credential": credential,
        "kind": kind,
    }
    new, set_state = object.__new__, object.__setattr__
    made = []
    for model in models:
        own = state.copy()
        own["name"] = model
        candidate = new(CandidateInput)  # _built, inline: this runs per candidate
        set_state(candidate, "__dict__", own)
        made.append(candidate)
    return tuple(made)


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

    def as_tuple(self) -> tuple[float, float, float, float, float, float]:
        """The scores in signal order: locality, queue, kv, prefix, latency, cost."""
        return (
            self.locality,
            self.queue_depth,
            self.kv_cache,
            self.prefix_cache,
            self.latency,
            self.cost,
        )


@dataclass(frozen=True)
class ScoreBreakdown:
    """Each signal's contribution wᵢ·sᵢ / Σw, and ``total`` (the score)."""

    locality: float
    queue_depth: float
    kv_cache: float
    prefix_cache: float
    latency: float
    cost: float
    total: float

    def as_dict(self) -> dict[str, float]:
        """The wire form of §5 ``score_breakdown``."""
        return {
            "locality": self.locality,
            "queue_depth": self.queue_depth,
            "kv_cache": self.kv_cache,
            "prefix_cache": self.prefix_cache,
            "latency": self.latency,
            "cost": self.cost,
            "total": self.total,
        }


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
        among its models this way.
        """
        if self.candidate is candidate:
            return self
        # dataclasses.replace(self, candidate=candidate), without the frozen __init__.
        state = vars(self).copy()
        state["candidate"] = candidate
        return _built(Evaluation, state)


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


_NONE_MISSING: frozenset[str] = frozenset()
"""Shared by every complete set of signals (an empty frozenset is not a singleton)."""

_SIGNAL_ORDER = ("locality", "queue_depth", "kv_cache", "prefix_cache", "latency", "cost")


def signal_scores(candidate: CandidateInput, context: ScoringContext) -> SignalScores:
    """Normalise the six signals to [0, 1], substituting 0.5 for missing ones.

    Queue depth and KV cache score ``1 - clamp(ratio)``, the prefix-cache hit
    ratio ``clamp(ratio)``, latency and cost ``1 - min(1, max(0, v) / ceiling)``.
    The clamps are written out (``x if x > 0.0 else 0.0`` is exactly
    ``max(0.0, x)`` and ``x if x < 1.0 else 1.0`` exactly ``min(1.0, x)``):
    this runs once per provider per render.
    """
    config = context.config
    values = candidate.signals
    queue, kv, prefix = (
        values.queue_depth,
        values.kv_cache_utilization,
        values.prefix_cache_hit_ratio,
    )
    latency, cost = values.p99_latency_ms, values.cost_per_million_input_tokens
    if queue is not None:
        queue = queue if queue > 0.0 else 0.0
        queue = 1.0 - (queue if queue < 1.0 else 1.0)
    if kv is not None:
        kv = kv if kv > 0.0 else 0.0
        kv = 1.0 - (kv if kv < 1.0 else 1.0)
    if prefix is not None:
        prefix = prefix if prefix > 0.0 else 0.0
        prefix = prefix if prefix < 1.0 else 1.0
    if latency is not None:
        latency = (latency if latency > 0.0 else 0.0) / config.latency_ceiling_ms
        latency = 1.0 - (latency if latency < 1.0 else 1.0)
    if cost is not None:
        cost = (cost if cost > 0.0 else 0.0) / config.cost_ceiling_per_million_input_tokens
        cost = 1.0 - (cost if cost < 1.0 else 1.0)
    locality = locality_score(candidate, context)
    missing = _NONE_MISSING
    if (
        locality is None
        or queue is None
        or kv is None
        or prefix is None
        or latency is None
        or cost is None
    ):
        raw = (locality, queue, kv, prefix, latency, cost)
        missing = frozenset(n for n, v in zip(_SIGNAL_ORDER, raw, strict=True) if v is None)
        neutral = NEUTRAL_SIGNAL_SCORE
        locality = neutral if locality is None else locality
        queue = neutral if queue is None else queue
        kv = neutral if kv is None else kv
        prefix = neutral if prefix is None else prefix
        latency = neutral if latency is None else latency
        cost = neutral if cost is None else cost
    # SignalScores(...), without the frozen __init__ (see `_built`).
    return _built(
        SignalScores,
        {
            "locality": locality,
            "queue_depth": queue,
            "kv_cache": kv,
            "prefix_cache": prefix,
            "latency": latency,
            "cost": cost,
            "missing": missing,
        },
    )


def blend(scores: SignalScores, weights: ScoringWeights) -> ScoreBreakdown:
    """The weighted mean Σwᵢsᵢ/Σwᵢ with each contribution wᵢsᵢ/Σwᵢ."""
    return _blend(scores, weights.as_tuple())


def _blend(
    scores: SignalScores, w: tuple[float, float, float, float, float, float]
) -> ScoreBreakdown:
    """`blend` with the weights already in signal order."""
    p = [
        w[0] * scores.locality,
        w[1] * scores.queue_depth,
        w[2] * scores.kv_cache,
        w[3] * scores.prefix_cache,
        w[4] * scores.latency,
        w[5] * scores.cost,
    ]
    d = sum(w)
    # ScoreBreakdown(p[0] / d, ..., p[5] / d, sum(p) / d), without the frozen __init__.
    return _built(
        ScoreBreakdown,
        {
            "locality": p[0] / d,
            "queue_depth": p[1] / d,
            "kv_cache": p[2] / d,
            "prefix_cache": p[3] / d,
            "latency": p[4] / d,
            "cost": p[5] / d,
            "total": sum(p) / d,
        },
    )


def evaluate(candidate: CandidateInput, context: ScoringContext) -> Evaluation:
    """Derive signal scores, admission, tier and (when enabled) the score."""
    config = context.config
    scores = signal_scores(candidate, context)
    breakdown = _blend(scores, config.weights.as_tuple()) if config.enabled else None
    # Evaluation(...), without the frozen __init__ (see `_built`).
    return _built(
        Evaluation,
        {
            "candidate": candidate,
            "signal_scores": scores,
            "admission": admission_state(candidate.signals, config.admission),
            "tier": selection_tier(candidate, context),
            "score": breakdown.total if breakdown else None,
            "breakdown": breakdown,
        },
    )
