"""Real MCP servers and A2A agents on loopback, built with the official SDKs (§16).

`serve_asgi` runs any ASGI app, such as the demo's MCP server
(`grid.demo.agent_servers.demo_tools`, re-exported here) at ``/mcp``, with uvicorn on a
free loopback port until the context ends. `serve_agent` runs the demo's A2A agent
(`grid.demo.a2a_agent.planner_app`) the same way, its card naming the port it got.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn

from grid.demo.a2a_agent import RPC_PATH, planner_app
from grid.demo.agent_servers import demo_tools
from grid.testing.poll import eventually

__all__ = ["ask_agent", "demo_tools", "planner_app", "serve_agent", "serve_asgi"]


async def ask_agent(
    base: str, text: str, *, streaming: bool = True, headers: dict[str, str] | None = None
) -> tuple[Any, str]:
    """Ask the agent at ``base`` (its card's base URL) with a2a-sdk's own client: the
    card it resolved and the text of every answer, joined."""
    import httpx
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.helpers import get_stream_response_text, new_text_message
    from a2a.types.a2a_pb2 import Role, SendMessageRequest

    async with httpx.AsyncClient(headers=headers or {}, timeout=30.0) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        config = ClientConfig(streaming=streaming, httpx_client=http)
        client = ClientFactory(config).create(card)
        request = SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))
        texts = [get_stream_response_text(r) async for r in client.send_message(request)]
        await client.close()
    return card, "".join(texts)


@contextlib.asynccontextmanager
async def serve_asgi(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 at a free port; yields ``host:port``."""
    async with _serve(lambda _address: app) as address:
        yield address


@contextlib.asynccontextmanager
async def serve_agent(site: str) -> AsyncIterator[str]:
    """Serve the demo's ``planner`` agent for ``site`` at a free port; yields ``host:port``."""
    async with _serve(lambda address: planner_app(site, f"http://{address}{RPC_PATH}")) as a:
        yield a


@contextlib.asynccontextmanager
async def _serve(build: Callable[[str], Any]) -> AsyncIterator[str]:
    """Bind a free loopback port, then serve ``build(host:port)`` on it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(build(address), log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: server.started or task.done(), "the server started")
        if task.done():
            task.result()
        yield address
    finally:
        server.should_exit = True
        await task
        sock.close()
