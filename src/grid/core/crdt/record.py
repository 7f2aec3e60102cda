"""The provider record: what one site tells the grid about one inference provider.

A record is the value of a provider's LWW register in a `GridStateSnapshot`. It
carries exactly what a consuming site needs to render the provider: identity
(name, cluster, site), the ``backend_kind`` and ``provider_kind``, the served
models, health, the InferenceProvider ``phase``, when the sample was observed,
the five scraped signals, the access policy's ``siteSelector.matchLabels``
(which the consuming site enforces), each model's capabilities and
``contextWindow`` (`ModelInfo`), and its ``capacityWeight`` (§14). A signal
that is ``None`` is *missing* (scoring treats it as neutral), never zero.

Records are immutable, validated on construction, and have a deterministic
``repr`` (models are kept sorted) so LWW tie-breaks agree on every site.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

from grid.core.vocabulary import (
    CAPACITY_WEIGHT_MAX,
    CAPACITY_WEIGHT_MIN,
    PROVIDER_KINDS,
    BackendKind,
)
from grid.errors import ValidationError

"""The ``spec.providerKind`` values of an InferenceProvider (seed 003)."""

PROVIDER_PHASES = ("Pending", "Available", "Degraded", "Unavailable")
"""The InferenceProvider phases (seed 003)."""

OBSERVED_AT_MAX = 253_402_300_799.0
"""The last second of the year 9999, the largest time a datetime can hold."""

RATIO_SIGNALS = ("queue_depth", "kv_cache_utilization", "prefix_cache_hit_ratio")
"""Signals that are ratios in [0, 1] (SPEC-DECISIONS §6)."""


def _check_signal(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"signal {name} must be a number", path=f"signals.{name}")
    if not math.isfinite(value) or value < 0:
        raise ValidationError(f"signal {name} must be finite and >= 0", path=f"signals.{name}")
    if name in RATIO_SIGNALS and value > 1:
        raise ValidationError(f"signal {name} is a ratio in [0, 1]", path=f"signals.{name}")


def _match_labels(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """Sorted, validated selector pairs: each key non-empty and named once."""
    keys = [key for key, _value in pairs]
    if any(not isinstance(k, str) or not k for k in keys):
        raise ValidationError("match label keys must be non-empty", path="access_match_labels")
    if any(not isinstance(v, str) for _k, v in pairs):
        raise ValidationError("match label values must be text", path="access_match_labels")
    if len(set(keys)) != len(keys):
        raise ValidationError("match label keys must be unique", path="access_match_labels")
    return tuple(sorted((str(k), str(v)) for k, v in pairs))


@dataclass(frozen=True, slots=True)
class RecordSignals:
    """The scraped signals of one provider; ``None`` means missing, never zero."""

    queue_depth: float | None = None
    kv_cache_utilization: float | None = None
    prefix_cache_hit_ratio: float | None = None
    p99_latency_ms: float | None = None
    cost_per_million_input_tokens: float | None = None
    requests: float | None = None
    """Requests waiting and running at the provider, a count (§14's load estimate)."""

    def __post_init__(self) -> None:
        for name in (*RATIO_SIGNALS, "p99_latency_ms", "cost_per_million_input_tokens", "requests"):
            _check_signal(name, getattr(self, name))


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One model's capabilities (sorted, unique) and context window in tokens."""

    name: str
    capabilities: tuple[str, ...] = ()
    context_window: int | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValidationError("model names must be non-empty", path="model_info")
        if any(not isinstance(c, str) or not c for c in self.capabilities):
            raise ValidationError("capabilities must be non-empty text", path="model_info")
        window = self.context_window
        if window is not None and (isinstance(window, bool) or window < 1):
            raise ValidationError("context_window must be a positive integer", path="model_info")
        object.__setattr__(self, "capabilities", tuple(sorted(set(self.capabilities))))


@dataclass(frozen=True, slots=True)
class ProviderRecord:
    """One provider as advertised by its origin site, with its latest signals.

    ``observed_at`` is the sample time in Unix seconds (UTC), supplied by the
    caller because the core never reads a clock. ``access_match_labels`` are the
    provider's ``accessPolicy.siteSelector.matchLabels`` as sorted ``(key, value)``
    pairs; empty admits every consuming site.
    """

    name: str
    cluster: str
    site: str
    backend_kind: BackendKind
    models: tuple[str, ...] = ()
    healthy: bool | None = None
    observed_at: float = 0.0
    signals: RecordSignals = field(default_factory=RecordSignals)
    phase: str = "Available"
    provider_kind: str = "self_hosted"
    access_match_labels: tuple[tuple[str, str], ...] = ()
    model_info: tuple[ModelInfo, ...] = ()
    """Capabilities and context window of models that declare any, by model name."""
    cost_per_million_output_tokens: float | None = None
    """The provider's output price in USD per million tokens, for tenant spend (§12)."""
    cost_per_million_input_tokens: float | None = None
    """The provider's input price in USD per million tokens, for tenant spend (§12).

    It comes from the spec and travels in the record under either signal
    transport; ``signals.cost_per_million_input_tokens`` is a ranking signal and
    is empty under poll."""
    capacity_weight: int = CAPACITY_WEIGHT_MIN
    """``spec.capacityWeight`` (1..1000): the provider's share of its selection group (§14)."""

    def __post_init__(self) -> None:
        _check_signal("cost_per_million_output_tokens", self.cost_per_million_output_tokens)
        _check_signal("cost_per_million_input_tokens", self.cost_per_million_input_tokens)
        weight = self.capacity_weight
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int)
            or not CAPACITY_WEIGHT_MIN <= weight <= CAPACITY_WEIGHT_MAX
        ):
            raise ValidationError(
                f"capacity_weight must be an integer in "
                f"{CAPACITY_WEIGHT_MIN}..{CAPACITY_WEIGHT_MAX}",
                path="capacity_weight",
            )
        for attr in ("name", "cluster", "site"):
            if not getattr(self, attr):
                raise ValidationError(f"provider record needs a {attr}", path=attr)
        if self.backend_kind not in set(BackendKind):
            raise ValidationError(
                f"backend_kind must be one of {', '.join(BackendKind)}", path="backend_kind"
            )
        # A caller may pass the string value; the record always holds the enum.
        object.__setattr__(self, "backend_kind", BackendKind(self.backend_kind))
        if self.phase not in PROVIDER_PHASES:
            raise ValidationError(
                f"phase must be one of {', '.join(PROVIDER_PHASES)}", path="phase"
            )
        if not 0 <= self.observed_at <= OBSERVED_AT_MAX:
            raise ValidationError(
                "observed_at must be Unix seconds between 1970 and 9999", path="observed_at"
            )
        if self.provider_kind not in PROVIDER_KINDS:
            raise ValidationError(
                f"provider_kind must be one of {', '.join(PROVIDER_KINDS)}", path="provider_kind"
            )
        if any(not model for model in self.models):
            raise ValidationError("model names must be non-empty", path="models")
        object.__setattr__(self, "models", tuple(sorted(set(self.models))))
        names = [info.name for info in self.model_info]
        if len(set(names)) != len(names) or not set(names) <= set(self.models):
            raise ValidationError(
                "model_info names each served model at most once", path="model_info"
            )
        object.__setattr__(self, "model_info", tuple(sorted(self.model_info, key=lambda i: i.name)))
        object.__setattr__(self, "access_match_labels", _match_labels(self.access_match_labels))

    def info(self, model: str) -> ModelInfo:
        """The capabilities and context window of one model (empty when it declares none)."""
        return next((i for i in self.model_info if i.name == model), ModelInfo(model))

    @property
    def observed_at_utc(self) -> datetime:
        """``observed_at`` as an aware UTC datetime (the signals document's form)."""
        return datetime.fromtimestamp(self.observed_at, tz=UTC)
