"""AgentToolProvider and AgentToAgentProvider: upstream's fields, defaults and refusals."""

from __future__ import annotations

from typing import Any

import pytest

from grid.core.resources import (
    AgentToAgentProvider,
    AgentToolProvider,
    InvalidResource,
    ProviderPhase,
    parse_resource,
)
from grid.core.resources.agent_spec import TOOL_NAME_CHARS_MAX, TOOLS_MAX


def tool_provider(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "AgentToolProvider",
        "metadata": {"name": "tools"},
        "spec": {"gridNetworkRef": "grid-demo", "endpoint": "http://tools:8000/mcp", **spec},
    }


def agent_provider(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "AgentToAgentProvider",
        "metadata": {"name": "planner"},
        "spec": {"gridNetworkRef": "grid-demo", "endpoint": "http://planner:9000", **spec},
    }


def test_a_tool_provider_reads_upstreams_fields_with_defaults() -> None:
    resource = parse_resource(
        tool_provider(
            protocol="mcp",
            tools=[{"name": "search", "description": "Search."}],
            accessPolicy={"siteSelector": {"matchLabels": {"tier": "prod"}}},
            auth={"strategy": "bearer_token", "secretRef": {"name": "s", "namespace": "n"}},
            siteSelector={"matchLabels": {"agents": "yes"}},
        )
    )
    assert isinstance(resource, AgentToolProvider)
    assert [t.name for t in resource.spec.tools] == ["search"]
    assert resource.spec.auth is not None and resource.spec.auth.strategy == "BearerToken"
    assert resource.spec.hosting_labels == {"agents": "yes"}
    assert resource.spec.health_check.interval == "10s"
    assert resource.phase is ProviderPhase.PENDING
    assert resource.cluster == "tools"


def test_an_agent_provider_reads_its_card_or_leaves_it_to_discovery() -> None:
    declared = parse_resource(
        agent_provider(protocol="a2a", agentCard={"modalities": ["text"], "skills": ["plan"]})
    )
    assert isinstance(declared, AgentToAgentProvider)
    assert declared.spec.agent_card is not None and declared.spec.agent_card.skills == ["plan"]
    discovered = parse_resource(agent_provider())
    assert isinstance(discovered, AgentToAgentProvider) and discovered.spec.agent_card is None


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        (tool_provider(protocol="a2a"), "spec.protocol"),
        (agent_provider(protocol="mcp"), "spec.protocol"),
        (tool_provider(tools=[{"name": "a"}, {"name": "a"}]), "spec.tools[1].name"),
        (tool_provider(tools=[{"name": "x" * (TOOL_NAME_CHARS_MAX + 1)}]), "spec.tools[0].name"),
        (tool_provider(tools=[{"name": f"t{i}"} for i in range(TOOLS_MAX + 1)]), "spec.tools"),
        (tool_provider(endpoint="ftp://tools"), "spec.endpoint"),
        (tool_provider(healthCheck={"interval": "1s", "timeout": "5s"}), "spec.healthCheck"),
        (tool_provider(unknown=1), "spec.unknown"),
        (agent_provider(agentCard={"skills": "plan"}), "spec.agentCard.skills"),
    ],
)
def test_bad_agent_resources_are_refused_naming_the_field(obj: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidResource) as info:
        parse_resource(obj)
    assert any(issue.path.startswith(path) for issue in info.value.issues), info.value.issues


def test_agent_status_moves_along_the_provider_phase_table() -> None:
    resource = parse_resource(tool_provider())
    assert isinstance(resource, AgentToolProvider)
    status = resource.model_copy(deep=True).status
    assert status is None
    parsed = parse_resource({**tool_provider(), "status": {"phase": "Available"}})
    assert parsed.status is not None
    parsed.status.transition_to("Degraded")
    assert parsed.status.phase is ProviderPhase.DEGRADED
