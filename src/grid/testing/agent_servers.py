"""Real MCP servers on loopback, built with the official SDK (§16).

`serve_asgi` runs any ASGI app, such as the demo's MCP server
(`grid.demo.agent_servers.demo_tools`, re-exported here) at ``/mcp``, with uvicorn on a
free loopback port until the context ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import uvicorn

from grid.demo.agent_servers import demo_tools
from grid.testing.poll import eventually

__all__ = ["demo_tools", "serve_asgi"]


@contextlib.asynccontextmanager
async def serve_asgi(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 at a free port; yields ``host:port``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: server.started or task.done(), "the server started")
        if task.done():
            task.result()
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()
