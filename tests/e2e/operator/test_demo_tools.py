"""The demo's MCP server and A2A agent, end to end (§16). The MCP server runs at east: it is
discovered by east's operator, offered to the mesh, and listed and called with the official
SDK's client through each site's gateway; killed, its tools leave the overlays within the
health bound, and restarted, they come back. The agent ``planner`` runs at west, and an
a2a-sdk client reaches it through east's gateway; the demo's live view shows both beside
the models."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest

from grid.demo.a2a_agent import plan_text
from grid.demo.live import DemoLiveView, site_addresses
from grid.demo.mesh import DemoMesh
from grid.testing.agent_servers import ask_agent
from grid.testing.poll import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]

SITES = ["east", "west"]
SETTLE_S = 60.0


@contextlib.asynccontextmanager
async def mcp_client(mesh: DemoMesh, site: str) -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    key = next(iter(mesh.api_keys.values()))
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"})
    async with http:
        url = f"http://{mesh.gateway_address(site)}/mcp"
        async with Client(streamable_http_client(url, http_client=http), cache=None) as client:
            yield client


async def tool_names(mesh: DemoMesh, site: str) -> set[str]:
    async with mcp_client(mesh, site) as client:
        return {t.name for t in (await client.list_tools()).tools}


async def test_the_demo_tools_are_listed_and_called_through_both_gateways(
    tmp_path: Path,
) -> None:
    mesh = DemoMesh(tmp_path, SITES)
    try:
        await mesh.prepare()
        await mesh.start()
        described = mesh.describe()
        assert described["tools"] == {
            "tools-east": f"127.0.0.1:{mesh.plan.sites['east'].tools_port}"
        }
        assert described["agents"] == {"planner": f"127.0.0.1:{mesh.plan.sites['west'].agent_port}"}
        await the_planner_answers_through_easts_gateway(mesh, described["a2a"])
        await the_live_view_shows_tools_and_agents_beside_models(mesh)
        both = {"search", "calculator"}
        for site in SITES:

            async def listed(site: str = site) -> bool:
                return await tool_names(mesh, site) == both

            await eventually(listed, f"{site}'s gateway lists the tools", timeout_s=SETTLE_S)
        async with mcp_client(mesh, "west") as client:
            answer = await client.call_tool("calculator", {"expression": "6*7"})
            assert answer.structured_content == {"result": 42.0}
            found = await client.call_tool("search", {"query": "grid"})
            assert found.content[0].text == "east: results for grid"
        child = mesh.children["tools-east"]
        assert child.process is not None
        mesh.kill_child("tools-east")
        await child.process.wait()

        async def gone() -> bool:
            return [await tool_names(mesh, s) for s in SITES] == [set(), set()]

        await eventually(gone, "the killed server's tools leave both overlays", timeout_s=SETTLE_S)
        await mesh.restart_child("tools-east")

        async def back() -> bool:
            return [await tool_names(mesh, s) for s in SITES] == [both, both]

        await eventually(back, "the restarted server's tools come back", timeout_s=SETTLE_S)
    finally:
        await mesh.stop()


async def the_planner_answers_through_easts_gateway(mesh: DemoMesh, base: str) -> None:
    """West's agent, gossiped to east, answers an a2a-sdk client at east's gateway."""
    assert base == f"http://{mesh.gateway_address('east')}/a2a/planner"
    headers = {"Authorization": f"Bearer {mesh.api_keys['globex']}"}

    async def card_served() -> bool:
        async with (
            aiohttp.ClientSession(headers=headers) as http,
            http.get(f"{base}/.well-known/agent-card.json") as resp,
        ):
            return resp.status == 200

    await eventually(card_served, "east's gateway serves west's agent", timeout_s=SETTLE_S)
    for streaming in (True, False):
        card, answer = await ask_agent(base, "ship it", streaming=streaming, headers=headers)
        assert [i.url for i in card.supported_interfaces] == [f"{base}/"]
        assert answer == plan_text("ship it", "west")
    async with aiohttp.ClientSession() as http, http.get(f"{base}/") as resp:
        assert resp.status == 401, "no key, no agent"


async def the_live_view_shows_tools_and_agents_beside_models(mesh: DemoMesh) -> None:
    """The aggregated view lists, from each site, the model, the tools and the agent."""
    view = DemoLiveView(site_addresses(mesh.describe()))
    want = {"inference_model", "mcp_tool", "a2a_agent"}
    async with aiohttp.ClientSession() as http:

        async def every_kind() -> bool:
            await view.poll_once(http)
            ranking = view.current["ranking"]
            kinds = {s: {m["kind"] for m in ranking.get(s, [])} for s in SITES}
            return all(k == want for k in kinds.values())

        await eventually(every_kind, "every kind in every site's view", timeout_s=SETTLE_S)
    names = {(m["kind"], m["model"]) for m in view.current["ranking"]["east"]}
    assert {("mcp_tool", "search"), ("mcp_tool", "calculator"), ("a2a_agent", "planner")} <= names
