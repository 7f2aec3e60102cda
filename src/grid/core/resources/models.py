"""Grid's custom resources: GridNetwork, GridSite, InferenceProvider and the agent kinds.

These pydantic v2 models are the one definition of the CRDs (seed 003, SPEC-DECISIONS
§2 and §4a). The Kubernetes OpenAPI schema (`grid.core.resources.crd_schema`), the manifest
loader (`grid.core.resources.manifest`), the resource store and the renderer all derive from
them, so a field exists in exactly one place. Fields are camelCase on the wire and
snake_case in Python; defaults are the spec's. `parse_resource` turns a decoded object
into a typed resource or raises `InvalidResource` naming every bad field's path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import pydantic
from pydantic import Field

from grid.core.resources.agent_spec import (
    AgentCardSpec,
    AgentHealthCheck,
    AgentToAgentProviderSpec,
    AgentToAgentProviderStatus,
    AgentToolProviderSpec,
    AgentToolProviderStatus,
    ToolSpec,
)
from grid.core.resources.duration import parse_duration
from grid.core.resources.errors import FieldIssue, InvalidResource, issues_from
from grid.core.resources.network_spec import (
    AdmissionSpec,
    AdmissionThresholdsSpec,
    ConsumerSpec,
    GatewayRef,
    GridNetworkSpec,
    ScoringSpec,
    ScoringWeightsSpec,
    SignalTransport,
    SwimSpec,
    TlsSpec,
    TrustSpec,
)
from grid.core.resources.object_meta import ObjectMeta, SecretRef
from grid.core.resources.phases import NetworkPhase, ProviderPhase, SitePhase, transition
from grid.core.resources.provider_spec import (
    AccessPolicy,
    AuthStrategy,
    Cost,
    HealthCheck,
    InferenceProviderSpec,
    MetricsConfig,
    ModelSpec,
    ProviderAuth,
    ProviderKind,
    SignalNames,
    SiteSelector,
)
from grid.core.resources.site_spec import Egress, EgressTls, GridSiteSpec, SiteTrust
from grid.core.resources.status import (
    Condition,
    GatewayFeedbackStatus,
    GatewayReporterStatus,
    GridNetworkStatus,
    GridSiteStatus,
    InferenceProviderStatus,
    OverlayStatus,
)
from grid.core.resources.types import WireModel
from grid.core.vocabulary import BackendKind
from grid.errors import NotFound

GROUP: Final = "grid.praxis-proxy.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "grid.praxis-proxy.io/v1alpha1"
LABEL_PREFIX: Final = "grid.praxis-proxy.io/"
AUTO_DISCOVER_LABEL: Final = f"{LABEL_PREFIX}auto-discover"
"""Label whose value ``"true"`` lets SWIM move a GridSite from Pending to Discovered."""
SITE_LABEL: Final = f"{LABEL_PREFIX}site"
"""Label naming the site of an InferenceProvider in a rendered file (§4a)."""

# --- the resources -------------------------------------------------------------------


class GridNetwork(WireModel):
    """The top-level tenancy boundary of a grid."""

    api_version: Literal["grid.praxis-proxy.io/v1alpha1"] = API_VERSION
    kind: Literal["GridNetwork"] = "GridNetwork"
    metadata: ObjectMeta
    spec: GridNetworkSpec = Field(default_factory=GridNetworkSpec)
    status: GridNetworkStatus | None = None

    @property
    def name(self) -> str:
        """`metadata.name`."""
        return self.metadata.name

    @property
    def phase(self) -> NetworkPhase:
        """The status phase, Pending before any status is written."""
        return self.status.phase if self.status else NetworkPhase.PENDING


class GridSite(WireModel):
    """A participating cluster of a grid."""

    api_version: Literal["grid.praxis-proxy.io/v1alpha1"] = API_VERSION
    kind: Literal["GridSite"] = "GridSite"
    metadata: ObjectMeta
    spec: GridSiteSpec
    status: GridSiteStatus | None = None

    @property
    def name(self) -> str:
        """`metadata.name`."""
        return self.metadata.name

    @property
    def phase(self) -> SitePhase:
        """The status phase, Pending before any status is written."""
        return self.status.phase if self.status else SitePhase.PENDING

    @property
    def auto_discover(self) -> bool:
        """Whether the auto-discover label allows SWIM to move it Pending -> Discovered."""
        return self.metadata.labels.get(AUTO_DISCOVER_LABEL) == "true"


class _ProviderResource:
    """What every provider resource (inference, tools, agents) answers alike."""

    if TYPE_CHECKING:
        metadata: ObjectMeta
        status: (
            InferenceProviderStatus | AgentToolProviderStatus | AgentToAgentProviderStatus | None
        )

    @property
    def name(self) -> str:
        """`metadata.name`."""
        return self.metadata.name

    @property
    def phase(self) -> ProviderPhase:
        """The status phase, Pending before any status is written."""
        return self.status.phase if self.status else ProviderPhase.PENDING

    @property
    def site_label(self) -> str | None:
        """The `grid.praxis-proxy.io/site` label naming the provider's site, if any."""
        return self.metadata.labels.get(SITE_LABEL)

    @property
    def cluster(self) -> str:
        """Routing identity: the provider's name."""
        return self.metadata.name


class InferenceProvider(_ProviderResource, WireModel):
    """Inference backend capacity available to a grid."""

    api_version: Literal["grid.praxis-proxy.io/v1alpha1"] = API_VERSION
    kind: Literal["InferenceProvider"] = "InferenceProvider"
    metadata: ObjectMeta
    spec: InferenceProviderSpec
    status: InferenceProviderStatus | None = None

    @property
    def cluster(self) -> str:
        """Routing identity: `spec.routingClusterRef`, else the provider's name."""
        return self.spec.routing_cluster_ref or self.metadata.name


class AgentToolProvider(_ProviderResource, WireModel):
    """An MCP server whose tools are offered to a grid (§16)."""

    api_version: Literal["grid.praxis-proxy.io/v1alpha1"] = API_VERSION
    kind: Literal["AgentToolProvider"] = "AgentToolProvider"
    metadata: ObjectMeta
    spec: AgentToolProviderSpec
    status: AgentToolProviderStatus | None = None


class AgentToAgentProvider(_ProviderResource, WireModel):
    """An A2A agent offered to a grid (§16)."""

    api_version: Literal["grid.praxis-proxy.io/v1alpha1"] = API_VERSION
    kind: Literal["AgentToAgentProvider"] = "AgentToAgentProvider"
    metadata: ObjectMeta
    spec: AgentToAgentProviderSpec
    status: AgentToAgentProviderStatus | None = None


AgentProvider = AgentToolProvider | AgentToAgentProvider
"""Either agent resource: both are hosted, selected and probed alike."""

Resource = GridNetwork | GridSite | InferenceProvider | AgentToolProvider | AgentToAgentProvider
"""Any Grid custom resource."""


def hosting_sites(
    provider: InferenceProvider | AgentProvider, sites: Iterable[GridSite]
) -> list[str]:
    """Names of the GridSites ``spec.siteSelector`` selects, sorted; [] without one.

    A site is selected when its labels contain every ``matchLabels`` pair and it
    belongs to the provider's network.
    """
    wanted = provider.spec.hosting_labels
    if not wanted:
        return []
    network = provider.spec.grid_network_ref
    return sorted(
        s.name
        for s in sites
        if s.spec.grid_network_ref == network
        and all(s.metadata.labels.get(k) == v for k, v in wanted.items())
    )


def hosts_here(
    provider: InferenceProvider | AgentProvider, site: GridSite | None, own_site: str
) -> bool:
    """Whether the operator of ``own_site`` serves ``provider`` (§2a).

    Without a siteSelector, the site label (default: the operator's site) decides;
    with one, the selector must select ``site``, this operator's own GridSite.
    """
    if not provider.spec.hosting_labels:
        return (provider.site_label or own_site) == own_site
    return site is not None and hosting_sites(provider, [site]) == [site.name]


_Hosted = TypeVar("_Hosted", InferenceProvider, AgentToolProvider, AgentToAgentProvider)


def pinned_to(provider: _Hosted, site: str) -> _Hosted:
    """``provider`` as hosted at ``site`` alone: site label set, siteSelector dropped.

    An operator renders a selected provider as its own at its own site; the other
    selected sites publish theirs, so each site contributes one candidate group.
    """
    if not provider.spec.hosting_labels:
        return provider
    labels = {**provider.metadata.labels, SITE_LABEL: site}
    return provider.model_copy(
        update={
            "metadata": provider.metadata.model_copy(update={"labels": labels}),
            "spec": provider.spec.model_copy(update={"site_selector": None}),
        }
    )


@dataclass(frozen=True, slots=True)
class KindInfo:
    """Naming of one custom resource kind (as in its CRD's ``spec.names``)."""

    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    model: (
        type[GridNetwork]
        | type[GridSite]
        | type[InferenceProvider]
        | type[AgentToolProvider]
        | type[AgentToAgentProvider]
    )

    @property
    def crd_name(self) -> str:
        """The CRD's own name, ``{plural}.{group}``."""
        return f"{self.plural}.{GROUP}"


KINDS: Mapping[str, KindInfo] = {
    "GridNetwork": KindInfo("GridNetwork", "gridnetworks", "gridnetwork", ("gn",), GridNetwork),
    "GridSite": KindInfo("GridSite", "gridsites", "gridsite", ("gs",), GridSite),
    "InferenceProvider": KindInfo(
        "InferenceProvider", "inferenceproviders", "inferenceprovider", ("ip",), InferenceProvider
    ),
    "AgentToolProvider": KindInfo(
        "AgentToolProvider", "agenttoolproviders", "agenttoolprovider", ("atp",), AgentToolProvider
    ),
    "AgentToAgentProvider": KindInfo(
        "AgentToAgentProvider",
        "agenttoagentproviders",
        "agenttoagentprovider",
        ("a2ap",),
        AgentToAgentProvider,
    ),
}
"""Every Grid kind, keyed by kind name, in dependency order (networks first)."""


def kind_info(name: str) -> KindInfo:
    """Resolve a kind, plural, singular or short name (case-insensitive) as kubectl does.

    Raises `grid.errors.NotFound` for an unknown name.
    """
    wanted = name.lower()
    for info in KINDS.values():
        if wanted in (info.kind.lower(), info.plural, info.singular, *info.short_names):
            return info
    known = ", ".join(KINDS)
    raise NotFound(f"unknown kind {name!r} (known kinds: {known})")


def parse_resource(obj: Mapping[str, Any]) -> Resource:
    """Validate a decoded object (from YAML or JSON) into a typed Grid resource.

    Raises `InvalidResource` (a `grid.errors.ValidationError`) whose `path` names the
    first bad field and whose `issues` list every one.
    """
    if not isinstance(obj, Mapping):
        raise InvalidResource([FieldIssue("", "a resource must be a mapping")])
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if api_version != API_VERSION:
        message = f"must be {API_VERSION!r}" if api_version else "required field is missing"
        raise InvalidResource([FieldIssue("apiVersion", message)], resource=_label(obj))
    if not isinstance(kind, str) or kind not in KINDS:
        known = ", ".join(KINDS)
        raise InvalidResource(
            [FieldIssue("kind", f"unknown kind (expected one of {known})")], resource=_label(obj)
        )
    try:
        return KINDS[kind].model.model_validate(obj)
    except pydantic.ValidationError as exc:
        raise InvalidResource(issues_from(exc), resource=_label(obj)) from None


def resource_label(obj: Mapping[str, Any]) -> str:
    """``Kind/name`` of a decoded object, as far as it can be read."""
    return _label(obj)


def _label(obj: Mapping[str, Any]) -> str:
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "?"
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f"{kind}/{name}" if isinstance(name, str) and name else f"{kind}/?"


__all__ = [
    "API_VERSION",
    "AUTO_DISCOVER_LABEL",
    "GROUP",
    "KINDS",
    "LABEL_PREFIX",
    "SITE_LABEL",
    "VERSION",
    "AccessPolicy",
    "AdmissionSpec",
    "AdmissionThresholdsSpec",
    "AgentCardSpec",
    "AgentHealthCheck",
    "AgentProvider",
    "AgentToAgentProvider",
    "AgentToAgentProviderSpec",
    "AgentToAgentProviderStatus",
    "AgentToolProvider",
    "AgentToolProviderSpec",
    "AgentToolProviderStatus",
    "AuthStrategy",
    "BackendKind",
    "Condition",
    "ConsumerSpec",
    "Cost",
    "Egress",
    "EgressTls",
    "FieldIssue",
    "GatewayFeedbackStatus",
    "GatewayRef",
    "GatewayReporterStatus",
    "GridNetwork",
    "GridNetworkSpec",
    "GridNetworkStatus",
    "GridSite",
    "GridSiteSpec",
    "GridSiteStatus",
    "HealthCheck",
    "InferenceProvider",
    "InferenceProviderSpec",
    "InferenceProviderStatus",
    "InvalidResource",
    "KindInfo",
    "MetricsConfig",
    "ModelSpec",
    "NetworkPhase",
    "ObjectMeta",
    "OverlayStatus",
    "ProviderAuth",
    "ProviderKind",
    "ProviderPhase",
    "Resource",
    "ScoringSpec",
    "ScoringWeightsSpec",
    "SecretRef",
    "SignalNames",
    "SignalTransport",
    "SitePhase",
    "SiteSelector",
    "SiteTrust",
    "SwimSpec",
    "TlsSpec",
    "ToolSpec",
    "TrustSpec",
    "WireModel",
    "hosting_sites",
    "hosts_here",
    "kind_info",
    "parse_duration",
    "parse_resource",
    "pinned_to",
    "resource_label",
    "transition",
]
