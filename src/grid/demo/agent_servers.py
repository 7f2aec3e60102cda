"""The demo's MCP server, built with the official ``mcp`` SDK (SPEC-DECISIONS §16).

`demo_tools` is an ``MCPServer`` with two tools, ``search`` (a canned answer naming
the site) and ``calculator`` (arithmetic, parsed, never evaluated as code).
``python -m grid.demo.agent_servers --site S --port P`` serves it at
``http://127.0.0.1:P/mcp`` (MCP streamable HTTP) until interrupted.
"""

from __future__ import annotations

import argparse
import ast
import operator
from collections.abc import Callable
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

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


def run_tools(site: str, port: int) -> None:
    """Serve `demo_tools` at ``127.0.0.1:port``/mcp until interrupted."""
    app = demo_tools(site).streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main(argv: list[str] | None = None) -> None:
    """``--site`` and ``--port``, then `run_tools`."""
    parser = argparse.ArgumentParser(description="The demo's MCP server.")
    parser.add_argument("--site", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    run_tools(args.site, args.port)


if __name__ == "__main__":
    main()
