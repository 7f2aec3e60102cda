"""The demo's tools and agent (§16): the MCP server at the first site, the A2A agent
``planner`` at another, each declared in its own site's store, reached by every gateway,
named in demo.json, and shown beside the models in the terminal view."""

from pathlib import Path

from rich.console import Console

from grid.adapters.store.sqlite import SqliteStore
from grid.core.resources.models import AgentToAgentProvider
from grid.demo import a2a_agent
from grid.demo.mesh import DemoMesh
from grid.demo.plan import AGENT_NAME, consumer_config, plan_mesh
from grid.demo.table import site_table


def test_the_agent_runs_at_a_site_other_than_the_mcp_servers(tmp_path: Path) -> None:
    plan = plan_mesh(tmp_path, ["east", "west", "central"])
    assert [s.name for s in plan.tool_sites] == ["east"]
    assert [s.name for s in plan.agent_sites] == ["west"]
    assert AGENT_NAME == a2a_agent.AGENT_NAME == plan.sites["west"].agent_cluster
    servers = dict(plan.agent_servers())
    west = plan.sites["west"]
    assert servers["agent-planner"][2:] == ["grid.demo.a2a_agent", "--site", "west", "--port",
                                            str(west.agent_port)]  # fmt: skip
    assert servers["tools-east"][2:4] == ["grid.demo.agent_servers", "--site"]
    endpoints = {
        e["cluster"]: e["address"]
        for e in consumer_config(plan, plan.sites["central"], tmp_path)["clusterEndpoints"]
    }
    assert endpoints["planner"] == f"127.0.0.1:{west.agent_port}"
    assert len(endpoints) == plan.cluster_count()
    described = plan.agent_description("127.0.0.1:8080")
    assert described["agents"] == {"planner": f"127.0.0.1:{west.agent_port}"}
    assert described["a2a"] == "http://127.0.0.1:8080/a2a/planner"
    assert described["mcp"] == "http://127.0.0.1:8080/mcp"
    assert plan_mesh(tmp_path, ["east"]).agent_sites == []  # one site: no other site to run it


async def test_the_agents_site_store_declares_it_and_no_other_does(tmp_path: Path) -> None:
    mesh = DemoMesh(tmp_path, ["east", "west"])
    await mesh.prepare()
    try:
        found = {}
        for name, site in mesh.plan.sites.items():
            store = await SqliteStore.open(site.store)
            try:
                found[name] = await store.list("AgentToAgentProvider")
            finally:
                await store.close()
        assert found["east"] == []
        (doc,) = found["west"]
        provider = AgentToAgentProvider.model_validate(doc)
        assert provider.name == "planner" and provider.spec.protocol == "a2a"
        assert provider.spec.endpoint == f"http://127.0.0.1:{mesh.plan.sites['west'].agent_port}"
        assert provider.spec.agent_card is None, "the operator reads the card from the agent"
    finally:
        await mesh.stop()


def test_the_terminal_view_names_each_candidates_kind() -> None:
    overlay = {
        "candidates": [
            {"rank": 0, "kind": "inference_model", "name": "m", "site": "east", "cluster": "c"},
            {"rank": 0, "kind": "mcp_tool", "name": "search", "site": "east", "cluster": "t"},
            {"rank": 0, "kind": "a2a_agent", "name": "planner", "site": "west", "cluster": "p"},
        ]
    }
    console = Console(width=200, record=True)
    console.print(site_table("east", overlay))
    rows = {
        cells[3].strip(): cells[2].strip()
        for cells in (line.split("│") for line in console.export_text().splitlines())
        if len(cells) > 3
    }
    assert rows == {"m": "model", "search": "tool", "planner": "agent"}
