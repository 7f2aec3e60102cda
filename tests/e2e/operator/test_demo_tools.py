"""The demo's MCP server, end to end (§16): discovered by east's operator, offered to the
mesh, and listed and called with the official SDK's client through each site's gateway.
Killed, its tools leave the overlays within the health bound; restarted, they come back."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from grid.demo.mesh import DemoMesh
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
