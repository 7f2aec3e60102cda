"""Status models of Grid's custom resources (SPEC-DECISIONS §2).

Status is written only by the operator, through the store's status subresource.
Every kind carries `phase`, `reason`, `message`, `observedGeneration` and Kubernetes
`conditions[]`; GridNetwork adds the grid ID, the connected-site count, the rendered
overlays and the gateway ingest feedback (§7). Phase changes go through
`transition_to`, which consults the kind's phase table and changes nothing when the
move is illegal.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from grid.core.resources.phases import NetworkPhase, ProviderPhase, SitePhase, transition
from grid.core.resources.types import (
    DNS_LABEL_PATTERN,
    NamespaceName,
    ObjectName,
    Text,
    Timestamp,
    U64Text,
    WireModel,
)

REPORTER_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
"""A gateway reporter identity (x-grid-ingest-reporter)."""


class Condition(WireModel):
    """A Kubernetes-style condition."""

    type: Text = Field(min_length=1)
    status: Literal["True", "False", "Unknown"]
    reason: Text | None = None
    message: Text | None = None
    last_transition_time: Timestamp | None = None
    observed_generation: int | None = Field(default=None, ge=0)


class _StatusBase(WireModel):
    reason: Text | None = None
    """Machine-readable reason for the current phase (CamelCase)."""
    message: Text | None = None
    """Human-readable detail; never carries credentials."""
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: list[Condition] = Field(default_factory=list)

    def condition(self, type_: str) -> Condition | None:
        """The condition of the given type, if present."""
        return next((c for c in self.conditions if c.type == type_), None)

    def set_condition(
        self,
        type_: str,
        status: Literal["True", "False", "Unknown"],
        *,
        reason: str | None = None,
        message: str | None = None,
        now: str,
        observed_generation: int | None = None,
    ) -> bool:
        """Record a condition with Kubernetes semantics; return whether anything changed.

        `lastTransitionTime` moves to `now` (an RFC 3339 string supplied by the caller,
        since the core reads no clock) only when `status` flips, so re-asserting the
        same condition is a no-op and the caller can skip the status write.
        """
        current = self.condition(type_)
        moved = current is None or current.status != status
        updated = Condition(
            type=type_,
            status=status,
            reason=reason,
            message=message,
            last_transition_time=now if moved or current is None else current.last_transition_time,
            observed_generation=observed_generation,
        )
        if current == updated:
            return False
        others = [c for c in self.conditions if c.type != type_]
        index = next((i for i, c in enumerate(self.conditions) if c.type == type_), len(others))
        others.insert(index, updated)
        self.conditions = others
        return True


StatusBase = _StatusBase
"""The fields every kind's status shares (for kinds defined in other modules)."""


class OverlayStatus(WireModel):
    """One rendered overlay ConfigMap of the network."""

    gateway: ObjectName
    namespace: NamespaceName | None = None
    config_map: Text
    revision: Text | None = None
    """The overlay's content-addressed revision (lowercase hex SHA-256)."""
    candidate_count: int = Field(default=0, ge=0)
    phase: Text | None = None
    """Rendering outcome, for example Rendered or Failed."""


class OverlayRevisionStatus(WireModel):
    """Upstream Grid's ``status.overlayStatus[]`` item: one gateway's rendered and
    distributed overlay revisions, written beside `OverlayStatus`.

    ``renderedRevision`` is the last revision rendered; ``distributedRevision``,
    ``contentDigest``, ``configMapResourceVersion`` and ``renderedAt`` describe the
    revision the ConfigMap holds (``renderedAt``: when that revision was first
    rendered, so a steady state rewrites nothing). After a failed render or write
    the previous distributed revision is kept (phase ``Retained``; ``Error`` when
    none was ever distributed), with reason ``OverlayRenderFailed`` or
    ``OverlayApplyFailed``.
    """

    gateway_name: ObjectName
    namespace: NamespaceName | None = None
    config_map_name: Text
    schema_version: str = ""
    rendered_revision: str = ""
    distributed_revision: str = ""
    content_digest: str = ""
    config_map_resource_version: str = ""
    rendered_at: str = ""
    candidate_count: int = Field(default=0, ge=0)
    phase: Literal["Pending", "Distributed", "Error", "Retained"] = "Pending"
    reason: str = ""
    message: str = ""
    observed_generation: int | None = Field(default=None, ge=0)


class ConsumerConfigStatus(WireModel):
    """The outcome of rendering one gateway's ``praxis.yaml`` (§11)."""

    gateway_name: ObjectName
    namespace: NamespaceName | None = None
    config_map_name: Text
    phase: Literal["Rendered", "Error", "Disabled"]
    reason: Text | None = None
    """Why it failed closed: MissingClusterEndpoint, MissingTransport, MissingSni,
    PlaintextWithSni; or Rendered / Disabled."""
    message: Text | None = None
    observed_generation: int | None = Field(default=None, ge=0)


class GatewayReporterStatus(WireModel):
    """Persisted ingest-feedback state of one gateway reporter.

    Epoch, sequence and rejected are u64 values and travel as decimal strings, because
    Kubernetes integers are int64.
    """

    reporter: str = Field(pattern=REPORTER_PATTERN)
    """Reporter identity of the gateway process: 1-64 of [A-Za-z0-9._-]."""
    replica: str | None = Field(default=None, max_length=63, pattern=DNS_LABEL_PATTERN)
    """Replica label; diagnostic only."""
    epoch: U64Text
    sequence: U64Text
    rejected: U64Text
    clean: bool
    evidence: bool = False
    """Whether this reporter currently holds rejection evidence."""
    last_report_time: Timestamp | None = None


class GatewayFeedbackStatus(WireModel):
    """Gateway ingest feedback of the network (the GatewayIngest condition's detail)."""

    reporters: list[GatewayReporterStatus] = Field(default_factory=list)
    reporters_with_evidence: int = Field(default=0, ge=0)


class GridNetworkStatus(_StatusBase):
    """Observed state of a GridNetwork."""

    phase: NetworkPhase = Field(default=NetworkPhase.PENDING, strict=False)
    grid_id: Text | None = None
    """Generated on first join unless spec.gridId pins it."""
    connected_sites: int = Field(default=0, ge=0)
    """Number of GridSites of this network currently Active."""
    overlays: list[OverlayStatus] = Field(default_factory=list)
    overlay_status: list[OverlayRevisionStatus] = Field(default_factory=list)
    """Upstream's per-gateway revision evidence, beside ``overlays``."""
    consumer_config_status: list[ConsumerConfigStatus] = Field(default_factory=list)
    gateway_feedback: GatewayFeedbackStatus | None = None
    budget_status: list[BudgetStatus] = Field(default_factory=list)
    """Spend of each tenant of spec.budgetPolicy, sorted by tenantId (§12)."""

    def transition_to(self, target: str) -> None:
        """Move to `target` if the GridNetwork phase table allows it, else raise unchanged."""
        self.phase = NetworkPhase(transition("GridNetwork", self.phase, target))


def conditions_draft(status: GridNetworkStatus | None) -> GridNetworkStatus:
    """A status holding only ``status``'s conditions, in a list of its own, for
    `set_condition` to edit. That method replaces the list and never edits a
    `Condition`, so the conditions themselves are shared: nothing else is copied."""
    return GridNetworkStatus(conditions=list(status.conditions) if status else [])


class SiteCapability(WireModel):
    """One model a site offers, as its provider records gossip it."""

    model: Text
    capabilities: list[Text] = Field(default_factory=list)
    context_window: int | None = Field(default=None, ge=0)
    providers: list[Text] = Field(default_factory=list)


class SiteTool(WireModel):
    """One MCP tool a site offers, with the AgentToolProviders serving it (§16)."""

    name: Text
    providers: list[Text] = Field(default_factory=list)


class SiteAgent(WireModel):
    """One A2A agent a site offers (§16); its name is its AgentToAgentProvider's."""

    name: Text


class SiteCapabilities(WireModel):
    """``GridSite.status.capabilities``: upstream's ``{inference, agentTools,
    agentToAgent}`` flags (whether the site offers any model, tool or agent), beside
    Grid's lists of what it offers (§16).

    A status written before the flags existed held the model list itself; it is
    read as ``models``, so an upgraded operator reads what an older one wrote.
    """

    inference: bool = False
    agent_tools: bool = False
    agent_to_agent: bool = False
    models: list[SiteCapability] = Field(default_factory=list)
    tools: list[SiteTool] = Field(default_factory=list)
    agents: list[SiteAgent] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _from_model_list(cls, value: object) -> object:
        if isinstance(value, list):
            return {"inference": bool(value), "models": value}
        return value


class BudgetStatus(WireModel):
    """One tracked tenant's spend (§12)."""

    tenant_id: Text = Field(min_length=1, max_length=256)
    spend_usd: float = Field(ge=0.0)
    cap_usd: float = Field(ge=0.0)
    spend_ratio: float = Field(ge=0.0, le=1.0)


class GridSiteStatus(_StatusBase):
    """Observed state of a GridSite."""

    phase: SitePhase = Field(default=SitePhase.PENDING, strict=False)
    public_cert_pem: str | None = Field(default=None, max_length=65536)
    """The leaf certificate (PEM, public part only) the last egress probe was shown;
    before any probe, the chain the site's cert lane gossips (never a key)."""
    last_probe_time: Timestamp | None = None
    """When the operator last probed the site's egress."""
    capabilities: SiteCapabilities = Field(default_factory=SiteCapabilities)
    """What the site offers: upstream's flags and each model, tool and agent (§16)."""

    def transition_to(self, target: str) -> None:
        """Move to `target` if the GridSite phase table allows it, else raise unchanged."""
        self.phase = SitePhase(transition("GridSite", self.phase, target))


class InferenceProviderStatus(_StatusBase):
    """Observed state of an InferenceProvider."""

    phase: ProviderPhase = Field(default=ProviderPhase.PENDING, strict=False)
    matching_sites: list[ObjectName] = Field(default_factory=list)
    """The GridSites spec.siteSelector selects, sorted (empty without a selector)."""

    def transition_to(self, target: str) -> None:
        """Move to `target` if the InferenceProvider phase table allows it, else raise."""
        self.phase = ProviderPhase(transition("InferenceProvider", self.phase, target))
