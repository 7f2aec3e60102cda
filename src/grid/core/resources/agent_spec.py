"""The agent resources' specs and status: AgentToolProvider (MCP) and AgentToAgentProvider (A2A).

Field names are upstream Grid's (SPEC-DECISIONS §16): ``gridNetworkRef``,
``endpoint``, ``protocol``, ``accessPolicy``, ``auth``, ``siteSelector``, and
``tools[] {name, description}`` or ``agentCard {modalities, skills}``. What a spec
omits is discovered: tools with MCP ``tools/list``, the card from the agent's
well-known path. ``healthCheck {interval, timeout, tls}`` is Grid's own: how often
that discovery runs, which doubles as the health check, as an InferenceProvider's
does. Status carries the InferenceProvider phases, ``matchingSites``, and what the
last discovery found.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from grid.core.resources.duration import Duration, parse_duration
from grid.core.resources.errors import field_error
from grid.core.resources.phases import ProviderPhase, transition
from grid.core.resources.provider_spec import (
    AccessPolicy,
    ProviderAuth,
    ProviderTls,
    SiteSelector,
)
from grid.core.resources.status import StatusBase
from grid.core.resources.types import ObjectName, Text, Url, WireModel

TOOL_NAME_CHARS_MAX = 128
"""Longest tool name accepted (the MCP specification's bound on a tool name)."""
TOOL_NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"
"""The characters the MCP specification allows in a tool name."""
DESCRIPTION_CHARS_MAX = 4096
"""Longest tool or skill description kept; a longer one is refused, never truncated."""
TOOLS_MAX = 1024
"""Most tools one AgentToolProvider may declare or have discovered (an overlay holds
at most 1,024 candidates, §5, so more could never be routed)."""
SKILLS_MAX = 256
"""Most skills or modalities one agent card entry may list."""


class ToolSpec(WireModel):
    """One MCP tool a provider serves."""

    name: str = Field(min_length=1, max_length=TOOL_NAME_CHARS_MAX, pattern=TOOL_NAME_PATTERN)
    description: str | None = Field(default=None, max_length=DESCRIPTION_CHARS_MAX)


class AgentCardSpec(WireModel):
    """What an A2A agent offers: its input/output modalities and its skill ids."""

    modalities: list[Text] = Field(default_factory=list, max_length=SKILLS_MAX)
    """Media types the agent accepts or produces (``text/plain``, ...)."""
    skills: list[Text] = Field(default_factory=list, max_length=SKILLS_MAX)
    """Skill ids, as the card's ``skills[].id``."""


class AgentHealthCheck(WireModel):
    """How often discovery runs (it doubles as the health check) and how long it may take."""

    interval: Duration = "10s"
    timeout: Duration = "2s"
    tls: ProviderTls | None = None
    """TLS of the HTTPS requests (a CA and a client certificate), as for providers."""

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> AgentHealthCheck:
        if parse_duration(self.timeout) > parse_duration(self.interval):
            raise field_error("timeout", "must not exceed interval")
        return self


class _AgentProviderSpec(WireModel):
    grid_network_ref: ObjectName
    endpoint: Url
    access_policy: AccessPolicy | None = None
    """Which sites may consume it; empty admits every site."""
    auth: ProviderAuth | None = None
    site_selector: SiteSelector | None = None
    """The GridSites that host it; empty or absent: the site holding it."""
    health_check: AgentHealthCheck = Field(default_factory=AgentHealthCheck)

    @property
    def hosting_labels(self) -> dict[str, str]:
        """``siteSelector.matchLabels``; empty means the site whose operator holds it."""
        return dict(self.site_selector.match_labels) if self.site_selector else {}


class AgentToolProviderSpec(_AgentProviderSpec):
    """Desired state of an AgentToolProvider: an MCP server offered to the grid."""

    protocol: Literal["mcp"] = "mcp"
    tools: list[ToolSpec] = Field(default_factory=list, max_length=TOOLS_MAX)
    """The tools served; empty: discovered with MCP ``tools/list``."""

    @model_validator(mode="after")
    def _unique_tools(self) -> AgentToolProviderSpec:
        seen: set[str] = set()
        for i, tool in enumerate(self.tools):
            if tool.name in seen:
                raise field_error(f"tools[{i}].name", f"duplicate tool {tool.name!r}")
            seen.add(tool.name)
        return self


class AgentToAgentProviderSpec(_AgentProviderSpec):
    """Desired state of an AgentToAgentProvider: an A2A agent offered to the grid."""

    protocol: Literal["a2a"] = "a2a"
    agent_card: AgentCardSpec | None = None
    """The agent's card; absent: read from its well-known path."""


class _AgentStatusBase(StatusBase):
    phase: ProviderPhase = Field(default=ProviderPhase.PENDING, strict=False)
    matching_sites: list[ObjectName] = Field(default_factory=list)
    """The GridSites spec.siteSelector selects, sorted (empty without a selector)."""

    def transition_to(self, target: str) -> None:
        """Move along the InferenceProvider phase table, or raise unchanged."""
        self.phase = ProviderPhase(transition("InferenceProvider", self.phase, target))


class AgentToolProviderStatus(_AgentStatusBase):
    """Observed state of an AgentToolProvider."""

    tools: list[ToolSpec] = Field(default_factory=list, max_length=TOOLS_MAX)
    """The tools the last successful discovery listed (or the spec's)."""


class AgentToAgentProviderStatus(_AgentStatusBase):
    """Observed state of an AgentToAgentProvider."""

    agent_card: AgentCardSpec | None = None
    """The card the last successful discovery read (or the spec's)."""
