"""Real MCP and A2A servers on loopback, built with the official SDKs (§16).

`demo_tools` is an MCP server (the ``mcp`` SDK's ``MCPServer``) with two tools,
``search`` and ``calculator``; `serve_asgi` runs any ASGI app (such as its
streamable-HTTP app, at ``/mcp``) with uvicorn on a free loopback port until the
context ends.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import operator
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

from grid.testing.poll import eventually

_OPERATORS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def evaluate(expression: str) -> float:
    """An arithmetic expression of numbers, + - * / and parentheses (nothing else)."""

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return float(_OPERATORS[type(node.op)](walk(node.left), walk(node.right)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ValueError("only numbers, + - * / and parentheses")

    return walk(ast.parse(expression, mode="eval"))


def demo_tools(site: str) -> MCPServer[Any]:
    """An MCP server named for ``site`` with the tools ``search`` and ``calculator``."""
    server: MCPServer[Any] = MCPServer(f"tools-{site}")

    @server.tool()
    def search(query: str) -> str:
        """Search the internal knowledge base."""
        return f"{site}: results for {query}"

    @server.tool()
    def calculator(expression: str) -> float:
        """Evaluate an arithmetic expression."""
        return evaluate(expression)

    return server


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


def run_tools(site: str, port: int) -> None:
    """Serve `demo_tools` at ``127.0.0.1:port``/mcp until interrupted (a child process)."""
    app = demo_tools(site).streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
