"""The GridNetwork spec: SWIM tuning, TLS and trust, scoring, admission, gateways.

Defaults are SPEC-DECISIONS §2's. Cross-field rules (existingOnly never above
excluded, spiffe needs a trust domain, gateways unique) raise errors that name the
exact field path.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from grid.core.resources.duration import Duration, parse_duration
from grid.core.resources.errors import field_error
from grid.core.resources.network_policy import (
    SCORING_PRESETS,
    AdmissionPolicySpec,
    BudgetPolicySpec,
    ScoringPolicySpec,
    SelectionPolicySpec,
)
from grid.core.resources.object_meta import SecretRef
from grid.core.resources.types import (
    HostPort,
    NamespaceName,
    NonNegative,
    ObjectName,
    Positive,
    Ratio,
    Text,
    TrustDomain,
    Url,
    WireModel,
)
from grid.core.vocabulary import OverlayFormat, RoutingPolicy, SelectionMode

GOSSIP_NODES_MAX = 64
"""Largest accepted `swim.gossipNodes`. Fan-out beyond this buys no speed in meshes
Grid targets and multiplies per-round bandwidth."""


class SwimSpec(WireModel):
    """SWIM protocol tuning; the SWIM runtime honours these values."""

    gossip_nodes: int = Field(default=3, ge=1, le=GOSSIP_NODES_MAX)
    """Peers each gossip round sends to. More converges faster at more bandwidth."""
    probe_interval: Duration = "5s"
    """Time between failure-detector probes of one random peer."""
    suspicion_timeout: Duration = "10s"
    """How long a suspected member may refute before it is declared dead."""

    @model_validator(mode="after")
    def _suspicion_covers_a_probe(self) -> SwimSpec:
        # A suspect must get at least one probe period to refute, or every
        # transient loss would declare members dead.
        if parse_duration(self.suspicion_timeout) < parse_duration(self.probe_interval):
            raise field_error("suspicionTimeout", "must not be shorter than probeInterval")
        return self

    @property
    def probe_interval_s(self) -> float:
        """`probe_interval` in seconds."""
        return parse_duration(self.probe_interval)

    @property
    def suspicion_timeout_s(self) -> float:
        """`suspicion_timeout` in seconds."""
        return parse_duration(self.suspicion_timeout)


class SignalTransport(WireModel):
    """How load signals cross sites (seed 000); absent means gossip."""

    mode: Literal["gossip", "poll"] = "gossip"


class TrustSpec(WireModel):
    """How a peer certificate is authorized."""

    mode: Literal["pin", "spiffe"] = "pin"
    """pin: leaf DER SHA-256 equals a GridSite's fingerprint; spiffe: URI SAN in trustDomain."""
    trust_domain: TrustDomain | None = None
    """SPIFFE trust domain, required when mode is spiffe."""

    @model_validator(mode="after")
    def _spiffe_needs_domain(self) -> TrustSpec:
        if self.mode == "spiffe" and not self.trust_domain:
            raise field_error("trustDomain", "is required when mode is spiffe")
        return self


class TlsSpec(WireModel):
    """Secret references for the grid CA, this site's certificate and the SWIM key."""

    ca_secret_ref: SecretRef | None = None
    site_secret_ref: SecretRef | None = None
    swim_key_ref: SecretRef | None = None
    """Secret holding the 32-byte AES-256-GCM SWIM key."""
    trust: TrustSpec = Field(default_factory=TrustSpec)


class ScoringWeightsSpec(WireModel):
    """Weight of each normalized signal in the blended score."""

    locality: NonNegative = 3.0
    queue_depth: NonNegative = 3.0
    kv_cache: NonNegative = 2.0
    prefix_cache: NonNegative = 2.0
    latency: NonNegative = 2.0
    cost: NonNegative = 1.0

    @model_validator(mode="after")
    def _not_all_zero(self) -> ScoringWeightsSpec:
        if sum(self.model_dump().values()) <= 0:
            raise field_error("", "at least one weight must be positive")
        return self


class ScoringSpec(WireModel):
    """Scoring weights and the ceilings that normalize latency and cost."""

    weights: ScoringWeightsSpec = Field(default_factory=ScoringWeightsSpec)
    latency_ceiling_ms: Positive = 5000.0
    """A p99 at or above this scores 0 on latency."""
    cost_ceiling_per_million_input_tokens: Positive = 100.0
    """An input price at or above this scores 0 on cost."""


class AdmissionThresholdsSpec(WireModel):
    """Ratios at or above which an admission state is triggered."""

    queue_depth: Ratio
    kv_cache: Ratio


def _existing_only_default() -> AdmissionThresholdsSpec:
    return AdmissionThresholdsSpec(queue_depth=0.85, kv_cache=0.90)


def _excluded_default() -> AdmissionThresholdsSpec:
    return AdmissionThresholdsSpec(queue_depth=0.98, kv_cache=0.98)


class AdmissionSpec(WireModel):
    """Thresholds for ExistingOnly and Excluded admission (a ratio at or above triggers)."""

    existing_only: AdmissionThresholdsSpec = Field(default_factory=_existing_only_default)
    excluded: AdmissionThresholdsSpec = Field(default_factory=_excluded_default)

    @model_validator(mode="after")
    def _existing_only_not_above_excluded(self) -> AdmissionSpec:
        for name in ("queueDepth", "kvCache"):
            attr = "queue_depth" if name == "queueDepth" else "kv_cache"
            if getattr(self.existing_only, attr) > getattr(self.excluded, attr):
                raise field_error(f"existingOnly.{name}", f"must not be above excluded.{name}")
        return self


class ClusterTransportSpec(WireModel):
    """How the gateway connects to one cluster endpoint (§11)."""

    mode: Literal["mutual_tls", "plaintext"]
    """``mutual_tls`` presents the gateway's certificate and verifies the cluster's."""
    sni: Text | None = None
    """TLS server name; required for ``mutual_tls`` and refused for ``plaintext``.

    Both rules are checked when ``praxis.yaml`` is rendered (``MissingSni``,
    ``PlaintextWithSni``), so a bad entry fails that render closed instead of
    refusing the whole GridNetwork."""


class ClusterEndpointSpec(WireModel):
    """Where one routing cluster is reached from the gateway."""

    cluster: Text = Field(min_length=1)
    """The candidate ``cluster`` this endpoint serves."""
    address: HostPort
    transport: ClusterTransportSpec | None = None
    """Absent fails the render closed with ``MissingTransport``."""


class ClientAuthSpec(WireModel):
    """How the gateway establishes a request's tenant (§15); ``none`` trusts the header."""

    mode: Literal["none", "apiKey", "mtls"] = "none"
    """``none``: the tenant header is trusted (trusted networks only). ``apiKey``: a
    hashed key from ``secretRef``. ``mtls``: the client certificate's tenant."""
    secret_ref: SecretRef | None = None
    """``apiKey`` only: the Secret key holding lines ``{tenant, sha256}`` in YAML, mounted
    at ``{credentialMountBase}/{name}/{key}``."""

    @model_validator(mode="after")
    def _secret_for_api_keys(self) -> ClientAuthSpec:
        if self.mode == "apiKey" and (self.secret_ref is None or not self.secret_ref.complete):
            raise field_error("secretRef", "apiKey needs a secretRef with name, namespace and key")
        if self.mode != "apiKey" and self.secret_ref is not None:
            raise field_error("secretRef", "only apiKey reads a Secret")
        return self


class ConsumerSpec(WireModel):
    """Render a complete Praxis configuration (``praxis.yaml``) for this gateway (§11)."""

    enabled: bool = False
    config_map_name: ObjectName = "praxis-consumer-config"
    """ConfigMap (in the gateway's namespace) holding the one key ``praxis.yaml``."""
    listener_port: int = Field(default=8080, ge=1, le=65535)
    """Port of the public listener, rendered as ``{listenerHost}:{listenerPort}``."""
    listener_host: Text = Field(default="0.0.0.0", min_length=1)
    """Grid extension: the public listener's bind host (the demo binds loopback)."""
    admin_address: HostPort = "127.0.0.1:9901"
    """Grid extension: the admin listener (``/ready``, ``/metrics``, ``/snapshot``)."""
    credential_mount_base: Text = Field(default="/run/secrets/grid-credentials", min_length=1)
    """A credential's file is ``{base}/{secret name}/{secret key}``."""
    tls_cert_mount_path: Text = Field(default="/etc/praxis/tls", min_length=1)
    """Directory holding ``ca.crt``, ``tls.crt`` and ``tls.key`` for ``mutual_tls`` clusters."""
    cluster_endpoints: list[ClusterEndpointSpec] = Field(default_factory=list)
    overlay_file: Text | None = Field(default=None, min_length=1)
    """Grid extension: render ``overlay_file`` mode reading this envelope path, instead of
    inline candidates. The embedded operator defaults it to the envelope it writes."""
    client_auth: ClientAuthSpec = Field(default_factory=ClientAuthSpec)
    """The ``client_auth`` filter, rendered ahead of routing (§15)."""

    @model_validator(mode="after")
    def _unique_clusters(self) -> ConsumerSpec:
        seen: set[str] = set()
        for i, endpoint in enumerate(self.cluster_endpoints):
            if endpoint.cluster in seen:
                raise field_error(
                    f"clusterEndpoints[{i}].cluster", f"duplicate cluster {endpoint.cluster!r}"
                )
            seen.add(endpoint.cluster)
        return self


class GatewayRef(WireModel):
    """A Praxis gateway that receives this network's overlay."""

    name: ObjectName
    namespace: NamespaceName | None = None
    """Namespace of the gateway and its overlay ConfigMap; absent means the caller's default."""
    local_site_name: ObjectName | None = None
    """The GridSite the gateway runs at; absent means the operator's own site."""
    consumer_config: ConsumerSpec | None = None
    overlay_format: OverlayFormat = Field(default=OverlayFormat.GRID, strict=False)
    """Grid extension: the overlay ConfigMap's layout. ``grid`` (the default) writes
    ``grid-config.json`` and ``grid-overlay.json``; ``upstream`` writes upstream
    Grid's ``routing-config.json`` and ``routing-overlay.json`` with its
    ``grid.praxis-proxy.io/overlay-*`` annotations, for consumers written against it."""
    admin_url: Url | None = None
    """Grid extension: the base URL of the gateway's admin listener as its site's operator
    reaches it (``http://edge-admin.gateways.svc:9901``). That operator reads
    ``{adminUrl}/metrics`` for the tenant tokens it prices (§12), as it reads every
    ``--gateway-metrics`` URL; absent, the gateway is metered only through that flag."""

    @model_validator(mode="after")
    def _admin_url_is_a_base(self) -> GatewayRef:
        if self.admin_url is not None and ("?" in self.admin_url or "#" in self.admin_url):
            raise field_error("adminUrl", "must be a base URL, without a query or fragment")
        return self


class GridNetworkSpec(WireModel):
    """Desired state of a GridNetwork, the top-level tenancy boundary."""

    grid_id: Text | None = None
    """Pins the grid ID; absent means one is generated on first join (status.gridId)."""
    seeds: list[HostPort] = Field(default_factory=list)
    """SWIM seed peers as host:port."""
    gateway_refs: list[GatewayRef] = Field(default_factory=list)
    region: Text | None = None
    zone: Text | None = None
    swim: SwimSpec = Field(default_factory=SwimSpec)
    signal_transport: SignalTransport | None = None
    tls: TlsSpec | None = None
    scoring: ScoringSpec = Field(default_factory=ScoringSpec)
    admission: AdmissionSpec = Field(default_factory=AdmissionSpec)
    stale_candidate_ttl_seconds: int | None = Field(default=None, ge=1)
    """Evict remote candidates whose newest signal is older; absent keeps them."""
    scoring_policy: ScoringPolicySpec | None = None
    """Upstream's preset of scoring.weights; ignored when spec.scoring is given."""
    admission_policy: AdmissionPolicySpec | None = None
    """Upstream's admission policy; ignored when spec.admission is given."""
    budget_policy: BudgetPolicySpec | None = None
    """Tenants whose spend is tracked (§12)."""
    metrics_refresh_interval: Duration | None = None
    """Scrape interval of providers whose metricsConfig sets none; absent means 15s."""
    routing_policy: RoutingPolicy | None = Field(default=None, strict=False)
    """What makes candidates equivalent (§14): ``geographyFirst`` (absent) groups by
    admission, tier and freshness; ``scoreFirst`` by admission and freshness."""
    selection_policy: SelectionPolicySpec | None = None
    """How a gateway picks inside a group (§14); absent means ``leastLoaded``."""

    @model_validator(mode="after")
    def _unique_gateways(self) -> GridNetworkSpec:
        seen: set[tuple[str, str | None]] = set()
        for i, ref in enumerate(self.gateway_refs):
            if (ref.name, ref.namespace) in seen:
                raise field_error(f"gatewayRefs[{i}].name", f"duplicate gateway {ref.name!r}")
            seen.add((ref.name, ref.namespace))
        return self

    def gateway_metrics_urls(self, site: str) -> list[str]:
        """The ``/metrics`` URLs of the gateways at ``site`` that name an ``adminUrl``
        (a gateway without ``localSiteName`` runs at the reading operator's site)."""
        return [
            f"{ref.admin_url.rstrip('/')}/metrics"
            for ref in self.gateway_refs
            if ref.admin_url is not None and (ref.local_site_name or site) == site
        ]

    @model_validator(mode="after")
    def _refresh_at_least_a_second(self) -> GridNetworkSpec:
        if self.metrics_refresh_interval and parse_duration(self.metrics_refresh_interval) < 1:
            raise field_error("metricsRefreshInterval", "must be at least 1s")
        return self

    @property
    def effective_weights(self) -> ScoringWeightsSpec:
        """``scoring.weights``, or scoringPolicy's preset when ``scoring`` is absent."""
        if self.scoring_policy is None or "scoring" in self.model_fields_set:
            return self.scoring.weights
        preset = SCORING_PRESETS[self.scoring_policy.strategy]
        names = ScoringWeightsSpec.model_fields
        return ScoringWeightsSpec.model_validate({n: preset.get(n, 0.0) for n in names})

    @property
    def effective_admission_policy(self) -> AdmissionPolicySpec | None:
        """admissionPolicy when it applies: given, and ``spec.admission`` absent."""
        if "admission" in self.model_fields_set:
            return None
        return self.admission_policy

    @property
    def seed_fields_won(self) -> tuple[str, ...]:
        """The upstream fields set aside because their seed-shaped twin is also given."""
        won = []
        if self.scoring_policy is not None and "scoring" in self.model_fields_set:
            won.append("scoringPolicy")
        if self.admission_policy is not None and "admission" in self.model_fields_set:
            won.append("admissionPolicy")
        return tuple(won)

    @property
    def metrics_refresh_s(self) -> float | None:
        """``metricsRefreshInterval`` in seconds, None when absent."""
        interval = self.metrics_refresh_interval
        return parse_duration(interval) if interval else None

    @property
    def effective_routing_policy(self) -> RoutingPolicy:
        """``routingPolicy``, ``geographyFirst`` when absent."""
        return self.routing_policy or RoutingPolicy.GEOGRAPHY_FIRST

    @property
    def selection_mode(self) -> SelectionMode:
        """``selectionPolicy.mode``, ``leastLoaded`` when the policy is absent."""
        policy = self.selection_policy
        return policy.mode if policy is not None else SelectionMode.LEAST_LOADED

    @property
    def signal_mode(self) -> Literal["gossip", "poll"]:
        """The declared signal transport, gossip when absent."""
        return self.signal_transport.mode if self.signal_transport else "gossip"
