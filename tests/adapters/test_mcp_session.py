"""`McpSession`: one ``initialize`` for many discoveries, renewed when it must be.

The server here speaks streamable HTTP with sessions (``Mcp-Session-Id``), counts
what it is asked, and can forget its sessions as a restarted server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from grid.adapters.agent_discovery import DiscoveryError, McpSession
from grid.testing.hostile_mcp import PROTOCOL_VERSION, tools_result


@dataclass
class Server:
    """What the session-keeping test server saw, and how it answers."""

    tools: list[str] = field(default_factory=lambda: ["calculator", "search"])
    sessions: set[str] = field(default_factory=set)
    initialized: int = 0
    listed: int = 0
    authorizations: list[str | None] = field(default_factory=list)
    garbage: bool = False
    stall: asyncio.Event | None = None
    ids: Any = field(default_factory=itertools.count)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/mcp", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        session = request.headers.get("Mcp-Session-Id")
        if request.method == "DELETE":
            self.sessions.discard(session or "")
            return web.Response(status=200)
        if request.method != "POST":
            return web.Response(status=405)
        message = await request.json()
        if message.get("method") == "initialize":
            self.initialized += 1
            self.authorizations.append(request.headers.get("Authorization"))
            new = f"s{next(self.ids)}"
            self.sessions.add(new)
            result = {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "kept", "version": "1"},
            }
            return self._answer(message, result, {"Mcp-Session-Id": new})
        if session not in self.sessions:
            return web.Response(status=404)  # what a restarted server says
        if "id" not in message:
            return web.Response(status=202)
        self.listed += 1
        if self.stall is not None:
            await self.stall.wait()
        if self.garbage:
            return web.Response(body=b"garbage", content_type="application/json")
        return self._answer(message, tools_result(self.tools), {})

    @staticmethod
    def _answer(message: dict[str, Any], result: Any, headers: dict[str, str]) -> web.Response:
        text = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
        body = io.BytesIO(text.encode())
        return web.Response(body=body, content_type="application/json", headers=headers)


@contextlib.asynccontextmanager
async def served(server: Server) -> AsyncIterator[str]:
    runner = web.AppRunner(server.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/mcp"
    finally:
        await runner.cleanup()


async def discover(session: McpSession, headers: dict[str, str] | None = None) -> list[str]:
    async with asyncio.timeout(30):
        return [tool.name for tool in await session.list_tools(headers or {})]


async def test_many_discoveries_share_one_initialize() -> None:
    server = Server()
    async with served(server) as url:
        session = McpSession(url, None)
        try:
            for _ in range(10):
                assert await discover(session) == ["calculator", "search"]
        finally:
            await session.close()
    assert (server.initialized, server.listed, session.sessions) == (1, 10, 1)


async def test_a_restarted_server_costs_a_new_session_not_a_failed_discovery() -> None:
    server = Server()
    async with served(server) as url:
        session = McpSession(url, None)
        try:
            await discover(session)
            server.sessions.clear()  # the server restarted: it knows no session
            server.tools = ["search"]
            assert await discover(session) == ["search"]
        finally:
            await session.close()
    assert server.initialized == 2


async def test_new_credentials_and_age_each_open_a_new_session() -> None:
    server = Server()
    now = [0.0]
    async with served(server) as url:
        session = McpSession(url, None, clock=lambda: now[0], max_age_s=60.0)
        try:
            await discover(session, {"Authorization": "Bearer one"})
            await discover(session, {"Authorization": "Bearer one"})
            await discover(session, {"Authorization": "Bearer two"})
            now[0] = 59.0
            await discover(session, {"Authorization": "Bearer two"})
            now[0] = 61.0
            await discover(session, {"Authorization": "Bearer two"})
        finally:
            await session.close()
    assert server.authorizations == ["Bearer one", "Bearer two", "Bearer two"]
    assert server.listed == 5


async def test_a_failure_in_a_fresh_session_is_the_discoverys_and_is_tried_once() -> None:
    server = Server(garbage=True)
    async with served(server) as url:
        session = McpSession(url, None)
        try:
            with pytest.raises(DiscoveryError) as fresh:
                await discover(session)
            assert fresh.value.reason == "InvalidJsonRpc"
            assert server.initialized == 1
            server.garbage = False
            await discover(session)
            server.garbage = True
            with pytest.raises(DiscoveryError):
                await discover(session)  # kept, then once more in a fresh session
            assert server.initialized == 3
        finally:
            await session.close()


async def test_a_discovery_cut_off_by_its_deadline_ends_its_session() -> None:
    server = Server(stall=asyncio.Event())
    async with served(server) as url:
        session = McpSession(url, None)
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    await session.list_tools({})
            server.stall.set()
            assert await discover(session) == ["calculator", "search"]
        finally:
            await session.close()
    assert server.initialized == 2
