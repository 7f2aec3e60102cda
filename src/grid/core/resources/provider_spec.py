"""The InferenceProvider spec: models, endpoint, cost, health, auth, access, metrics.

Field names are SPEC-DECISIONS §4a's; metric signal names default to vLLM's.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, WithJsonSchema, model_validator

from grid.core.resources.duration import Duration, parse_duration
from grid.core.resources.errors import field_error
from grid.core.resources.object_meta import SecretRef
from grid.core.resources.types import (
    HttpPath,
    LabelKey,
    LabelValue,
    MetricSource,
    NonNegative,
    ObjectName,
    Text,
    Url,
    WireModel,
)


class BackendKind(StrEnum):
    """Where an inference backend runs (InferenceProvider ``spec.backendKind``, seed 003).

    The one type for the concept: the CRD field, the scoring engine and the CRDT
    provider record all hold it; the wire maps it to ``grid.swim.v1.BackendKind``
    by member name (``LOCAL`` <-> ``BACKEND_KIND_LOCAL``).
    """

    LOCAL = "local"
    REMOTE = "remote"
    CLOUD_MANAGED = "cloud_managed"
    API_PROVIDER = "api_provider"

    @property
    def self_hosted(self) -> bool:
        """True for capacity a Grid site runs itself (``local`` or ``remote``)."""
        return self in (BackendKind.LOCAL, BackendKind.REMOTE)


_BackendKindField = Annotated[
    BackendKind,
    # Manifests carry the value as a string: lax mode turns it into the enum.
    Field(strict=False),
    # The CRD publishes the values only, as for the other enumerations (no description).
    WithJsonSchema({"enum": [kind.value for kind in BackendKind], "type": "string"}),
]

ProviderKind = Literal["open_ai", "anthropic", "bedrock", "vertex", "self_hosted"]
AuthStrategy = Literal[
    "ApiKey", "BearerToken", "MtlsOnly", "Oauth2", "ServiceAccount", "Sigv4", "Custom"
]


class ModelSpec(WireModel):
    """One model a provider serves."""

    name: Text = Field(min_length=1)
    capabilities: list[Text] = Field(default_factory=list)
    """Free-form capability tags such as chat, tools or embeddings."""
    context_window: int | None = Field(default=None, ge=1)
    """Maximum context length in tokens."""


class Cost(WireModel):
    """Price per million tokens, in the grid's currency unit."""

    per_million_input_tokens: NonNegative | None = None
    per_million_output_tokens: NonNegative | None = None


class HealthCheck(WireModel):
    """How the provider's health is probed."""

    path: HttpPath = "/health"
    interval: Duration = "10s"
    timeout: Duration = "2s"

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> HealthCheck:
        if parse_duration(self.timeout) > parse_duration(self.interval):
            raise field_error("timeout", "must not exceed interval")
        return self


class ProviderAuth(WireModel):
    """How Praxis authenticates to the provider; only a Secret reference is kept."""

    strategy: AuthStrategy
    secret_ref: SecretRef | None = None


class SiteSelector(WireModel):
    """Labels a consuming site's GridSite must all carry; empty admits every site."""

    match_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)


class AccessPolicy(WireModel):
    """Which sites may consume the provider."""

    site_selector: SiteSelector = Field(default_factory=SiteSelector)


class SignalNames(WireModel):
    """Prometheus names the scraper maps to Grid's signals (defaults cover vLLM).

    A value is a metric name, or ``numerator/denominator`` for a ratio of two counters
    (a counter matches with or without its ``_total`` suffix). A histogram name yields
    its p99, converted to milliseconds when the metric is in seconds.
    """

    queue_depth: MetricSource = "vllm:num_requests_waiting"
    kv_cache_utilization: MetricSource = "vllm:kv_cache_usage_perc"
    prefix_cache_hit_ratio: MetricSource = "vllm:prefix_cache_hits/vllm:prefix_cache_queries"
    latency_p99_ms: MetricSource = "vllm:e2e_request_latency_seconds"
    healthy: MetricSource | None = None
    """A gauge that is 1 when healthy; absent means health comes from the health check."""


class MetricsConfig(WireModel):
    """Prometheus scrape configuration of a provider."""

    endpoint: Url | None = None
    """Scrape base URL; absent means spec.endpoint."""
    path: HttpPath = "/metrics"
    interval: Duration = "15s"
    timeout: Duration = "2s"
    queue_capacity: int | None = Field(default=None, ge=1)
    """Divides the raw queue depth into a ratio; absent means it already is one."""
    signal_names: SignalNames = Field(default_factory=SignalNames)

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> MetricsConfig:
        if parse_duration(self.timeout) > parse_duration(self.interval):
            raise field_error("timeout", "must not exceed interval")
        return self


class InferenceProviderSpec(WireModel):
    """Desired state of an InferenceProvider, inference capacity offered to the grid."""

    grid_network_ref: ObjectName
    backend_kind: _BackendKindField
    provider_kind: ProviderKind
    models: list[ModelSpec] = Field(min_length=1)
    endpoint: Url | None = None
    cost: Cost | None = None
    health_check: HealthCheck | None = None
    auth: ProviderAuth | None = None
    access_policy: AccessPolicy | None = None
    metrics_config: MetricsConfig | None = None
    routing_cluster_ref: Text | None = Field(default=None, min_length=1)
    """Routing identity in Praxis; absent means the provider's name."""

    @model_validator(mode="after")
    def _unique_models(self) -> InferenceProviderSpec:
        seen: set[str] = set()
        for i, model in enumerate(self.models):
            if model.name in seen:
                raise field_error(f"models[{i}].name", f"duplicate model {model.name!r}")
            seen.add(model.name)
        return self

    @property
    def self_hosted(self) -> bool:
        """Whether the backend is self-hosted (local or remote)."""
        return self.backend_kind.self_hosted
