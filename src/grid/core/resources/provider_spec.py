"""The InferenceProvider spec: models, endpoint, cost, health, auth, access, metrics.

Field names are SPEC-DECISIONS §4a's; metric signal names default to vLLM's. The
fields upstream Grid's manifests carry (§2a) are accepted with the meanings
docs/migrating-from-upstream.md gives: the snake_case auth strategies (normalized to
the seed spelling on read), ``auth.manual``, ``siteSelector``, the health check's
and the scrape's ``endpoint``/``tls``, ``staleMetricsSeconds``, ``poolName``,
``signalNames.errorRate`` and a free-form ``providerKind``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from grid.core.resources.duration import Duration, parse_duration
from grid.core.resources.errors import field_error
from grid.core.resources.object_meta import SecretRef
from grid.core.resources.types import (
    HttpPath,
    LabelKey,
    LabelValue,
    MetricSource,
    NamespaceName,
    NonNegative,
    ObjectName,
    Text,
    Url,
    WireModel,
)
from grid.core.vocabulary import CAPACITY_WEIGHT_MAX, CAPACITY_WEIGHT_MIN, BackendKind

_BackendKindField = Annotated[
    BackendKind,
    # Manifests carry the value as a string: lax mode turns it into the enum.
    Field(strict=False),
    # The CRD publishes the values only, as for the other enumerations (no description).
    WithJsonSchema({"enum": [kind.value for kind in BackendKind], "type": "string"}),
]


ProviderKind = Annotated[str, Field(min_length=1, max_length=63)]

AuthStrategy = Literal[
    "ApiKey", "BearerToken", "MtlsOnly", "Oauth2", "ServiceAccount", "Sigv4", "Custom"
]

UPSTREAM_AUTH_STRATEGIES: dict[str, str] = {
    "api_key": "ApiKey",
    "bearer_token": "BearerToken",
    "mtls_only": "MtlsOnly",
    "oauth2": "Oauth2",
    "service_account": "ServiceAccount",
    "sigv4": "Sigv4",
    "custom": "Custom",
}
"""Upstream Grid's wire spellings of ``auth.strategy`` and the seed spelling each means."""


def _seed_strategy(value: object) -> object:
    # One internal value per strategy: the upstream spelling reads as the seed's.
    return UPSTREAM_AUTH_STRATEGIES.get(value, value) if isinstance(value, str) else value


_AuthStrategyField = Annotated[
    AuthStrategy,
    BeforeValidator(_seed_strategy),
    WithJsonSchema(
        {
            "enum": [*UPSTREAM_AUTH_STRATEGIES.values(), *UPSTREAM_AUTH_STRATEGIES],
            "type": "string",
        }
    ),
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


class CaSecretRef(WireModel):
    """A CA bundle (PEM) in a key of a namespaced Secret."""

    name: ObjectName
    namespace: NamespaceName
    key: Text = Field(default="ca.crt", min_length=1)


class ClientCertificateSecretRef(WireModel):
    """A client certificate and its private key (PEM) in two keys of one Secret."""

    name: ObjectName
    namespace: NamespaceName
    certificate_key: Text = Field(default="tls.crt", min_length=1)
    private_key_key: Text = Field(default="tls.key", min_length=1)


class ProviderTls(WireModel):
    """TLS of the health check's or the scrape's HTTPS requests (upstream Grid's shape).

    ``caSecretRef`` verifies the provider's certificate (absent: the system trust
    store); ``clientCertificateSecretRef`` is presented as the client certificate
    (absent: none). The operator reads both Secrets from the store; their bytes are
    never logged or copied into status.
    """

    ca_secret_ref: CaSecretRef | None = None
    client_certificate_secret_ref: ClientCertificateSecretRef | None = None


class HealthCheck(WireModel):
    """How the provider's health is probed."""

    endpoint: Url | None = None
    """Base URL of the health check; absent means spec.endpoint."""
    tls: ProviderTls | None = None
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

    strategy: _AuthStrategyField
    """The seed spelling (``ApiKey``) or upstream's (``api_key``); both read as the seed's."""
    secret_ref: SecretRef | None = None
    manual: bool = False
    """True: Grid projects no credential reference; the user wires it at the gateway."""


class SiteSelector(WireModel):
    """Labels a GridSite must all carry to be selected.

    Under ``accessPolicy`` it names the consuming sites (empty admits every site);
    as ``spec.siteSelector`` the hosting sites (empty means the holding site).
    """

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
    error_rate: MetricSource | None = None
    """Upstream's error-rate source. Validated only: §4 has no error-rate signal, so Grid
    neither scrapes nor scores it (docs/migrating-from-upstream.md)."""


class MetricsConfig(WireModel):
    """Prometheus scrape configuration of a provider."""

    endpoint: Url | None = None
    """Scrape base URL; absent means spec.endpoint."""
    metrics_endpoint: Url | None = None
    """Upstream's name for ``endpoint``; both given must be equal."""
    tls: ProviderTls | None = None
    path: HttpPath = "/metrics"
    interval: Duration = "15s"
    """Scrape interval; absent means the GridNetwork's metricsRefreshInterval, else 15s."""
    timeout: Duration = "2s"
    queue_capacity: int | None = Field(default=None, ge=1)
    """Divides the raw queue depth into a ratio; absent means it already is one."""
    stale_metrics_seconds: int | None = Field(default=None, ge=1)
    """A sample whose exposition timestamp is older than this counts as missing."""
    pool_name: LabelValue | None = Field(default=None, min_length=1)
    """Only series whose ``pool``, ``pool_name`` or ``model_name`` label equals it count."""
    signal_names: SignalNames = Field(default_factory=SignalNames)

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> MetricsConfig:
        if parse_duration(self.timeout) > parse_duration(self.interval):
            raise field_error("timeout", "must not exceed interval")
        if self.endpoint and self.metrics_endpoint and self.endpoint != self.metrics_endpoint:
            raise field_error("metricsEndpoint", "must equal endpoint when both are given")
        return self

    @property
    def base_url(self) -> str | None:
        """The scrape base URL, ``endpoint`` or its alias ``metricsEndpoint``."""
        return self.endpoint or self.metrics_endpoint

    def interval_s(self, default_s: float | None = None) -> float:
        """The scrape interval in seconds; ``default_s`` when ``interval`` was not written."""
        if default_s is not None and "interval" not in self.model_fields_set:
            return default_s
        return parse_duration(self.interval)


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
    site_selector: SiteSelector | None = None
    """The GridSites that host this provider; empty or absent: the site holding it."""
    metrics_config: MetricsConfig | None = None
    routing_cluster_ref: Text | None = Field(default=None, min_length=1)
    """Routing identity in Praxis; absent means the provider's name."""
    capacity_weight: int = Field(
        default=CAPACITY_WEIGHT_MIN, ge=CAPACITY_WEIGHT_MIN, le=CAPACITY_WEIGHT_MAX
    )
    """This provider's share of its group under ``weightedRandom`` and ``leastLoaded``
    (§14): an integer 1..1000, relative to the other providers of the group."""

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

    @property
    def hosting_labels(self) -> dict[str, str]:
        """``siteSelector.matchLabels``; empty means the site whose operator holds it."""
        return dict(self.site_selector.match_labels) if self.site_selector else {}
