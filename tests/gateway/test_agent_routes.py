"""``/mcp`` and ``/a2a/{agent}`` through one gateway (§16), with the official MCP SDK on
both sides: an SDK client lists and calls tools served by two SDK servers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from grid.core.overlay.ids import stable_id
from grid.gateway.config import load_config
from grid.gateway.server import Gateway
from grid.gateway.settings import GatewaySettings
from grid.testing.agent_servers import demo_tools, serve_asgi
from grid.testing.gateway import Upstream, overlay, render_praxis


def tool(name: str, cluster: str, site: str = "east", kind: str = "mcp_tool") -> dict[str, Any]:
    return {
        "kind": kind,
        "name": name,
        "site": site,
        "cluster": cluster,
        "fresh": True,
        "stable_id": stable_id(kind, name, site, cluster),
        "admission_state": "new_and_existing",
        "selection_tier": "same_site" if site == "east" else "cross_region",
        "rank": 0,
    }


def upstream(name: str, address: str) -> Upstream:
    found = Upstream(name)
    found.port = int(address.rsplit(":", 1)[1])
    return found


@contextlib.asynccontextmanager
async def gateway(
    tmp: Path, candidates: list[dict[str, Any]], upstreams: list[Upstream]
) -> AsyncIterator[str]:
    rendered, public, _admin = render_praxis(overlay(*candidates), upstreams, tmp)
    path = tmp / "praxis.yaml"
    path.write_text(rendered.text)
    running = Gateway(load_config(path, 1 << 20), GatewaySettings(), path)
    await running.start()
    try:
        yield public
    finally:
        await running.stop()


@contextlib.asynccontextmanager
async def sdk_client(public: str) -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with Client(streamable_http_client(f"http://{public}/mcp"), cache=None) as client:
        yield client


async def test_an_sdk_client_lists_and_calls_tools_of_two_sites_through_the_gateway(
    tmp_path: Path,
) -> None:
    east_app = demo_tools("east").streamable_http_app()
    west_app = demo_tools("west").streamable_http_app()
    async with serve_asgi(east_app) as east, serve_asgi(west_app) as west:
        candidates = [
            tool("search", "mcp-east"),
            tool("calculator", "mcp-east"),
            tool("search", "mcp-west", site="west"),
        ]
        ups = [upstream("mcp-east", east), upstream("mcp-west", west)]
        async with gateway(tmp_path, candidates, ups) as public, sdk_client(public) as client:
            listed = await client.list_tools()
            tools = {t.name: t for t in listed.tools}
            assert set(tools) == {"search", "calculator"}
            assert tools["calculator"].description == "Evaluate an arithmetic expression."
            assert tools["search"].input_schema["required"] == ["query"]
            answer = await client.call_tool("calculator", {"expression": "(2+3)*4"})
            assert not answer.is_error and answer.structured_content == {"result": 20.0}
            found = await client.call_tool("search", {"query": "grid"})
            assert found.content[0].text == "east: results for grid"  # type: ignore[union-attr]
            with pytest.raises(Exception, match="unknown tool"):
                await client.call_tool("teleport", {})


async def test_a_dead_provider_fails_over_before_the_first_byte(tmp_path: Path) -> None:
    west_app = demo_tools("west").streamable_http_app()
    async with serve_asgi(west_app) as west:
        dead = upstream("mcp-east", "127.0.0.1:9")  # nothing listens on the discard port
        candidates = [tool("search", "mcp-east"), tool("search", "mcp-west", site="west")]
        async with (
            gateway(tmp_path, candidates, [dead, upstream("mcp-west", west)]) as public,
            sdk_client(public) as client,
        ):
            found = await client.call_tool("search", {"query": "q"})
            assert found.content[0].text == "west: results for q"  # type: ignore[union-attr]


async def test_malformed_messages_get_json_rpc_errors_never_a_traceback(tmp_path: Path) -> None:
    async with (
        gateway(
            tmp_path, [tool("search", "mcp-east")], [upstream("mcp-east", "127.0.0.1:9")]
        ) as public,
        aiohttp.ClientSession() as http,
    ):
        url = f"http://{public}/mcp"
        async with http.post(url, data=b"{not json") as resp:
            assert resp.status == 400 and (await resp.json())["error"]["code"] == -32700
        async with http.post(url, json=[{"jsonrpc": "2.0", "id": 1}]) as resp:
            assert (await resp.json())["error"]["code"] == -32600
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {}}
        async with http.post(url, json=call) as resp:
            assert (await resp.json())["error"]["code"] == -32602
        call["params"] = {"name": "search"}
        async with http.post(url, json=call) as resp:  # its only provider is unreachable
            answer = await resp.json()
            assert answer["id"] == 7 and answer["error"]["code"] == -32603
        async with http.get(url) as resp:
            assert resp.status == 405


async def test_a2a_requests_reach_the_selected_agent(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append((request.method, request.path_qs))
        return web.json_response({"jsonrpc": "2.0", "id": 1, "result": {"ok": True}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    address = f"127.0.0.1:{runner.addresses[0][1]}"
    candidates = [tool("planner", "planner", kind="a2a_agent")]
    try:
        async with (
            gateway(tmp_path, candidates, [upstream("planner", address)]) as public,
            aiohttp.ClientSession() as http,
        ):
            body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}}
            async with http.post(f"http://{public}/a2a/planner/", json=body) as resp:
                assert resp.status == 200 and (await resp.json())["result"] == {"ok": True}
            async with http.get(f"http://{public}/a2a/planner/.well-known/agent-card.json") as r:
                assert r.status == 200
            async with http.get(f"http://{public}/a2a/nobody/") as resp:
                assert resp.status == 404
                assert (await resp.json())["error"]["code"] == "no_candidate"
            async with http.get(f"http://{public}/a2a/planner/%2e%2e/admin") as resp:
                assert resp.status == 404
        assert seen == [("POST", "/"), ("GET", "/.well-known/agent-card.json")]
    finally:
        await runner.cleanup()
