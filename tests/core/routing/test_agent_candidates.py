"""Tool and agent candidates (§16): drafted, scored, grouped and restricted like models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grid.core.crdt.offer import AgentOffer
from grid.core.overlay.verify import verify
from grid.core.resources import AgentProvider, parse_resource
from grid.core.routing.agent_candidates import offer_routes
from grid.core.routing.explain import explain
from grid.core.routing.mesh_view import mesh_inputs
from grid.core.routing.render import RenderInputs, render
from grid.errors import ValidationError
from grid.gateway.snapshot import read_overlay

from .test_render import NOW, build, world

API = "grid.praxis-proxy.io/v1alpha1"


def tool_provider(name: str, tools: list[str], at: str = "east", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "AgentToolProvider",
        "metadata": {"name": name, "labels": {"grid.praxis-proxy.io/site": at}},
        "spec": {
            "gridNetworkRef": "grid",
            "endpoint": f"http://{name}.svc:8000/mcp",
            "tools": [{"name": t} for t in tools],
        }
        | spec,
    }


def agent(name: str, at: str = "west", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "AgentToAgentProvider",
        "metadata": {"name": name, "labels": {"grid.praxis-proxy.io/site": at}},
        "spec": {"gridNetworkRef": "grid", "endpoint": f"http://{name}.svc:9000"} | spec,
    }


def with_agents(*objs: dict[str, Any], w: dict[str, Any] | None = None) -> RenderInputs:
    inputs, _ = build(w or world())
    agents: list[AgentProvider] = [parse_resource(o) for o in objs]  # type: ignore[misc]
    return RenderInputs(inputs.networks, inputs.sites, inputs.providers, inputs.secrets, agents)


def overlay(inputs: RenderInputs, **kwargs: Any) -> Any:
    return render(inputs, site="east", gateway="edge", now=NOW, **kwargs)


def kinds(rendered: Any) -> list[tuple[str, str, str, str]]:
    return [(c["kind"], c["name"], c["site"], c["cluster"]) for c in rendered.overlay["candidates"]]


def test_each_tool_and_agent_is_a_candidate_inside_the_digest() -> None:
    inputs = with_agents(tool_provider("mcp", ["search", "calculator"]), agent("planner"))
    rendered = overlay(inputs)
    found = kinds(rendered)
    assert ("mcp_tool", "calculator", "east", "mcp") in found
    assert ("mcp_tool", "search", "east", "mcp") in found
    assert ("a2a_agent", "planner", "west", "planner") in found
    assert sum(k[0] == "inference_model" for k in found) == len(kinds(overlay(with_agents())))
    assert verify(rendered.envelope).accepted
    fewer = overlay(with_agents(tool_provider("mcp", ["search"]), agent("planner")))
    assert fewer.envelope["revision"]["value"] != rendered.envelope["revision"]["value"]
    tool = next(c for c in rendered.overlay["candidates"] if c["name"] == "search")
    assert tool["stable_id"] and tool["selection_tier"] == "same_site"
    (row,) = explain(inputs, site="east", model="search").rows
    assert row.kind == "mcp_tool" and set(row.missing_signals) == {
        "queue_depth",
        "kv_cache",
        "prefix_cache",
        "latency",
        "cost",
    }
    assert row.signal_scores["queue_depth"] == 0.5 and row.signal_scores["locality"] == 1.0


def test_the_gateway_loader_and_the_verifier_take_tool_and_agent_candidates(
    tmp_path: Path,
) -> None:
    rendered = overlay(with_agents(tool_provider("mcp", ["search"]), agent("planner")))
    path = tmp_path / "grid-overlay.json"
    path.write_text(json.dumps(rendered.envelope))
    snapshot = read_overlay(path, rendered.scope.as_dict(), 1 << 20)
    assert {(c.kind, c.name) for c in snapshot.candidates} >= {
        ("mcp_tool", "search"),
        ("a2a_agent", "planner"),
    }
    broken = json.loads(json.dumps(rendered.envelope))
    broken["overlay"]["candidates"][0]["kind"] = "a2a_tool"
    verdict = verify(broken)
    assert verdict.reason == "malformed_structure" and "a2a_agent" in verdict.detail


def test_a_tool_provider_without_declared_tools_serves_the_discovered_ones() -> None:
    discovered = tool_provider("mcp", []) | {
        "status": {"phase": "Available", "tools": [{"name": "lookup"}]}
    }
    assert ("mcp_tool", "lookup", "east", "mcp") in kinds(overlay(with_agents(discovered)))


def test_phases_and_the_access_policy_exclude_or_stale_as_for_models() -> None:
    down = tool_provider("down", ["a"]) | {"status": {"phase": "Unavailable"}}
    slow = tool_provider("slow", ["b"]) | {"status": {"phase": "Degraded"}}
    gated = agent("gold-only", accessPolicy={"siteSelector": {"matchLabels": {"tier": "gold"}}})
    denied = agent("silver-only", accessPolicy={"siteSelector": {"matchLabels": {"tier": "x"}}})
    inputs = with_agents(down, slow, gated, denied)
    rendered = overlay(inputs)
    names = {c["name"]: c for c in rendered.overlay["candidates"]}
    assert "a" not in names and "silver-only" not in names
    assert names["b"]["fresh"] is False and "gold-only" in names
    rows = {r.model: r for r in explain(inputs, site="east", capability="agentToAgent").rows}
    assert rows["silver-only"].status == "access_denied"
    assert rows["silver-only"].kind == "a2a_agent"
    tools = {r.model: r.status for r in explain(inputs, site="east", capability="agentTools").rows}
    assert tools == {"a": "provider_unavailable", "b": "ranked"}


def test_missing_pressure_metrics_never_exclude_a_tool() -> None:
    w = world()
    w["networks"][0]["spec"]["admissionPolicy"] = {"missingMetrics": "excluded"}
    rendered = overlay(with_agents(tool_provider("mcp", ["search"]), w=w))
    assert ("mcp_tool", "search", "east", "mcp") in kinds(rendered)


def test_capabilities_choose_the_models_the_tools_or_the_agents() -> None:
    inputs = with_agents(tool_provider("mcp", ["search"]), agent("planner"))
    assert {k[0] for k in kinds(overlay(inputs, capability="agentTools"))} == {"mcp_tool"}
    assert {k[0] for k in kinds(overlay(inputs, capability="agentToAgent"))} == {"a2a_agent"}
    assert {k[0] for k in kinds(overlay(inputs, capability="inference"))} == {"inference_model"}
    assert kinds(overlay(inputs, capability="inference")) == kinds(overlay(with_agents()))
    assert overlay(inputs, capability="chat").overlay["candidates"] == []


def test_tools_of_one_name_at_two_providers_share_a_group() -> None:
    inputs = with_agents(tool_provider("mcp-a", ["search"]), tool_provider("mcp-b", ["search"]))
    tools = [c for c in overlay(inputs).overlay["candidates"] if c["kind"] == "mcp_tool"]
    assert [c["cluster"] for c in tools] == ["mcp-a", "mcp-b"]
    assert {c["selection_group"] for c in tools} == {0}


def test_other_sites_offers_render_at_their_site_unless_an_own_resource_has_them() -> None:
    offers = offer_routes(
        [
            ("west", AgentOffer("tools", "mcp-west", "search")),
            ("west", AgentOffer("tools", "mcp-west", "fetch")),
            ("east", AgentOffer("tools", "mcp", "search")),
            ("west", AgentOffer("agents", "planner", "planner", (("tier", "x"),))),
        ]
    )
    assert [(o.site, o.provider, o.names) for o in offers] == [
        ("east", "mcp", ("search",)),
        ("west", "planner", ("planner",)),
        ("west", "mcp-west", ("fetch", "search")),
    ]
    base, _ = build(world())
    own = parse_resource(tool_provider("mcp", ["search"]))
    network = base.networks[0]
    inputs = mesh_inputs(network, base.sites, [], [], [], "east", [own], offers)  # type: ignore[list-item]
    assert [o.provider for o in inputs.offers] == ["planner", "mcp-west"]
    rendered = overlay(inputs)
    found = kinds(rendered)
    assert ("mcp_tool", "fetch", "west", "mcp-west") in found
    assert ("mcp_tool", "search", "east", "mcp") in found
    assert not any(k[1] == "planner" for k in found)  # east lacks tier=x


def test_a_tool_credential_key_missing_from_its_secret_is_refused_by_name() -> None:
    auth = {"strategy": "BearerToken", "secretRef": {"name": "creds", "namespace": "grid-system"}}
    auth["secretRef"]["key"] = "absent"
    inputs = with_agents(tool_provider("mcp", ["search"], auth=auth))
    with pytest.raises(ValidationError, match="AgentToolProvider/mcp"):
        overlay(inputs)
