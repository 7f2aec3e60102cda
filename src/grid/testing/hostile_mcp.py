"""A hand-written MCP streamable-HTTP server that misbehaves on purpose, and a hostile agent.

The official SDK's server cannot be made to answer with 100,000 tools cheaply or
with invalid JSON-RPC at all, so these few lines speak the wire directly: the
initialize handshake (legacy), then whatever ``tools/list`` answer a test asks for.
`agent_card_app` serves an agent card body chosen by the test (too large, too deep).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

PROTOCOL_VERSION = "2025-06-18"


def hostile_mcp_app(tools_answer: Callable[[], Any]) -> web.Application:
    """An MCP endpoint at ``/mcp`` whose ``tools/list`` result is ``tools_answer()``.

    A value that is ``bytes`` is sent as the raw body (for invalid JSON-RPC).
    """

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.Response(status=405)
        message = await request.json()
        method = message.get("method")
        if "id" not in message:
            return web.Response(status=202)
        if method == "initialize":
            result: Any = {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }
        elif method == "tools/list":
            answer = tools_answer()
            if isinstance(answer, bytes):
                return web.Response(body=io.BytesIO(answer), content_type="application/json")
            result = answer
        else:
            error = {"code": -32601, "message": "Method not found"}
            body = {"jsonrpc": "2.0", "id": message["id"], "error": error}
            return web.json_response(body)
        text = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
        return web.Response(body=io.BytesIO(text.encode()), content_type="application/json")

    app = web.Application(client_max_size=1024 * 1024)
    app.router.add_route("*", "/mcp", handle)
    return app


def tools_result(names: list[str]) -> dict[str, Any]:
    """A ``tools/list`` result listing ``names``."""
    return {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in names]}


def agent_card_app(body: Callable[[], bytes]) -> web.Application:
    """An agent whose well-known card is ``body()``."""

    async def card(_request: web.Request) -> web.Response:
        return web.Response(body=io.BytesIO(body()), content_type="application/json")

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    return app
