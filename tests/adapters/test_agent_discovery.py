"""Discovery against real servers on loopback: the MCP SDK's server, and hostile ones.

Tools are listed with the official ``mcp`` client over streamable HTTP; hostile
servers answer with 100,000 tools, a 1 MB name or invalid JSON-RPC, and hostile
agents with a 100 MB or deeply nested card. Each is refused with its reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
import uvicorn
from a2a.types import AgentCapabilities, AgentCard, AgentSkill
from aiohttp import web
from google.protobuf.json_format import MessageToDict
from mcp.server.mcpserver import MCPServer

from grid.adapters.agent_discovery import (
    DiscoveryError,
    DiscoveryLimits,
    list_mcp_tools,
    parse_card,
    read_agent_card,
)
from grid.testing.hostile_mcp import agent_card_app, hostile_mcp_app, tools_result


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def mcp_server() -> AsyncIterator[str]:
    server = MCPServer("tools")

    @server.tool()
    def calculator(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    @server.tool()
    def search(query: str) -> str:
        """Search the knowledge base."""
        return f"results for {query}"

    config = uvicorn.Config(
        server.streamable_http_app(), host="127.0.0.1", port=0, log_level="error"
    )
    running = uvicorn.Server(config)
    task = asyncio.create_task(running.serve())
    async with asyncio.timeout(30):
        while not running.started:
            await asyncio.sleep(0.01)
    port = running.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        running.should_exit = True
        await task


async def test_tools_are_listed_from_the_sdk_server() -> None:
    async with mcp_server() as url:
        tools = await asyncio.wait_for(list_mcp_tools(url, {}, None), 30)
    assert sorted((t.name, t.description) for t in tools) == [
        ("calculator", "Add two numbers."),
        ("search", "Search the knowledge base."),
    ]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (lambda: tools_result([f"t{i}" for i in range(100_000)]), "TooManyTools"),
        (lambda: tools_result(["x" * 1_000_000]), "InvalidToolName"),
        (lambda: tools_result(["bad name"]), "InvalidToolName"),
        (lambda: tools_result(["a", "a"]), "DuplicateToolName"),
        (lambda: b'{"jsonrpc": "2.0", "nope": 1}', "InvalidJsonRpc"),
        (lambda: b"garbage", "InvalidJsonRpc"),
        (lambda: {"tools": "not a list"}, "InvalidJsonRpc"),
    ],
)
async def test_a_hostile_tools_list_is_refused_with_a_reason(
    answer: Callable[[], Any], reason: str
) -> None:
    async with serve(hostile_mcp_app(answer)) as base:
        with pytest.raises(DiscoveryError) as info:
            await asyncio.wait_for(list_mcp_tools(f"{base}/mcp", {}, None), 60)
    assert info.value.reason == reason
    assert "x" * 100 not in info.value.message


async def test_a_body_over_the_bound_is_cut_off() -> None:
    names = [f"tool-{i:05d}" for i in range(500)]
    async with serve(hostile_mcp_app(lambda: tools_result(names))) as base:
        with pytest.raises(DiscoveryError) as info:
            limits = DiscoveryLimits(body_bytes_max=4096)
            await asyncio.wait_for(list_mcp_tools(f"{base}/mcp", {}, None, limits), 30)
    assert info.value.reason == "ResponseTooLarge"


async def test_an_unreachable_server_is_a_reason_not_a_traceback() -> None:
    async with serve(web.Application()) as base:
        pass  # closed: nothing listens any more
    with pytest.raises(DiscoveryError) as info:
        await asyncio.wait_for(list_mcp_tools(f"{base}/mcp", {}, None), 30)
    assert info.value.reason == "Unreachable"


def card_json() -> bytes:
    card = AgentCard(
        name="Trip planner",
        description="Plans trips.",
        version="1.0.0",
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "application/json"],
        capabilities=AgentCapabilities(streaming=False),
        skills=[AgentSkill(id="plan-trip", name="Plan a trip", description="d", tags=["t"])],
    )
    return json.dumps(MessageToDict(card)).encode()


async def test_the_agent_card_is_read_with_a2a_types() -> None:
    async with serve(agent_card_app(card_json)) as base, aiohttp.ClientSession() as session:
        card = await read_agent_card(session, base, {}, None)
    assert card.skills == ["plan-trip"]
    assert card.modalities == ["application/json", "text/plain"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (lambda: b"[" * 100_000 + b"]" * 100_000, "CardTooDeep"),
        (lambda: b'{"name": "' + b"x" * (100 * 1024 * 1024) + b'"}', "ResponseTooLarge"),
        (lambda: b"not json", "InvalidAgentCard"),
        (lambda: b'{"skills": "nope"}', "InvalidAgentCard"),
    ],
)
async def test_a_hostile_agent_card_is_refused(body: Callable[[], bytes], reason: str) -> None:
    payload = body()
    async with (
        serve(agent_card_app(lambda: payload)) as base,
        aiohttp.ClientSession() as session,
    ):
        with pytest.raises(DiscoveryError) as info:
            await asyncio.wait_for(read_agent_card(session, base, {}, None), 60)
    assert info.value.reason == reason


def test_nesting_inside_strings_does_not_count() -> None:
    body = json.dumps({"name": "[" * 1000, "skills": []}).encode()
    assert parse_card(body).skills == []
