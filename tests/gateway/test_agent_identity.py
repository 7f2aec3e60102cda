"""Tenants at ``/mcp`` and ``/a2a/{agent}`` (§15, §16), with the official SDKs' servers.

A tenant whose budget view is spent after K tool calls is refused the next with 429
``budget_exhausted``, the refused call neither relayed nor counted. Under ``apiKey`` a
request without a key, or with a wrong one, gets 401 ``unauthenticated`` on both routes
before any provider is contacted, and neither the answer nor any log line echoes the key.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
from aiohttp import web

from grid.core.identity import key_line
from grid.core.overlay.consumer import dump_yaml
from grid.core.overlay.ids import stable_id
from grid.gateway.config import load_config
from grid.gateway.server import Gateway
from grid.gateway.settings import GatewaySettings
from grid.testing.agent_servers import demo_tools, serve_asgi
from grid.testing.gateway import Upstream, overlay, render_praxis
from grid.testing.poll import eventually

ACME_KEY = "grid-acme-5f0c6a1e9b2d4c7f8a3e6b1d0c9f2a7e"
WRONG_KEY = "grid-acme-00000000000000000000000000000000"
CALLS = 3
"""K: the tool calls acme makes before its budget view is spent."""


def candidate(kind: str, name: str, cluster: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "name": name,
        "site": "east",
        "cluster": cluster,
        "fresh": True,
        "stable_id": stable_id(kind, name, "east", cluster),
        "admission_state": "new_and_existing",
        "selection_tier": "same_site",
        "rank": 0,
    }


def upstream(name: str, address: str) -> Upstream:
    found = Upstream(name)
    found.port = int(address.rsplit(":", 1)[1])
    return found


def budget_view(path: Path, ratio: float) -> None:
    view = {"network": "net", "budgets": [{"tenant_id": "acme", "spend_ratio": ratio}]}
    path.write_text(json.dumps(view | {"generated_at": "2026-01-01T00:00:00Z"}))


@contextlib.asynccontextmanager
async def gateway(
    tmp: Path, mcp: str, agent: str, client_auth: dict[str, Any] | None = None
) -> AsyncIterator[tuple[str, Gateway, str]]:
    """A gateway (public, itself, admin) routing ``calculator`` to ``mcp`` and ``planner``
    to ``agent``."""
    candidates = [
        candidate("mcp_tool", "calculator", "tools"),
        candidate("a2a_agent", "planner", "planner"),
    ]
    rendered, public, admin = render_praxis(
        overlay(*candidates), [upstream("tools", mcp), upstream("planner", agent)], tmp
    )
    document = rendered.document
    if client_auth is not None:
        document["filter_chains"][0]["filters"][0] = {"filter": "client_auth", **client_auth}
    path = tmp / "praxis.yaml"
    path.write_text(dump_yaml(document))
    budgets = tmp / "grid-budgets.json"
    budget_view(budgets, 0.0)
    settings = GatewaySettings(budgets_file=str(budgets), overlay_poll_interval_s=0.05)
    running = Gateway(load_config(path, 1 << 20), settings, path)
    await running.start()
    try:
        yield public, running, admin
    finally:
        await running.stop()


@contextlib.asynccontextmanager
async def recording_agent() -> AsyncIterator[tuple[str, list[str]]]:
    """An agent stand-in that records every path it is asked for."""
    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"name": "planner", "skills": []})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def sdk_client(public: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers=headers)
    async with http:
        transport = streamable_http_client(f"http://{public}/mcp", http_client=http)
        async with Client(transport, cache=None) as client:
            yield client


def tools_call(call_id: int) -> dict[str, Any]:
    params = {"name": "calculator", "arguments": {"expression": "1+1"}}
    return {"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": params}


async def test_a_tenant_out_of_calls_is_refused_the_next_tool_call(tmp_path: Path) -> None:
    key = ("acme", "tools", "mcp_tool")
    async with (
        serve_asgi(demo_tools("east").streamable_http_app()) as mcp,
        recording_agent() as (agent, _),
        gateway(tmp_path, mcp, agent) as (public, running, _),
    ):
        async with sdk_client(public, {"x-grid-tenant": "acme"}) as client:
            for _ in range(CALLS):
                answer = await client.call_tool("calculator", {"expression": "6*7"})
                assert answer.structured_content == {"result": 42.0}
        assert running.meter.calls[key] == CALLS
        budget_view(tmp_path / "grid-budgets.json", 1.0)  # what the operator writes now
        await eventually(lambda: running.meter.is_exhausted("acme"), "the view is taken")
        async with aiohttp.ClientSession() as http:
            url = f"http://{public}/mcp"
            acme, globex = {"x-grid-tenant": "acme"}, {"x-grid-tenant": "globex"}
            async with http.post(url, json=tools_call(9), headers=acme) as resp:
                assert resp.status == 429
                assert (await resp.json())["error"]["code"] == "budget_exhausted"
            assert running.meter.calls[key] == CALLS, "the refused call is not counted"
            async with http.post(url, json=tools_call(10), headers=globex) as resp:
                assert resp.status == 200, "another tenant still calls"


async def _status_and_body(
    http: aiohttp.ClientSession, method: str, url: str, headers: dict[str, str], **kw: Any
) -> tuple[int, bytes]:
    async with http.request(method, url, headers=headers, **kw) as resp:
        return resp.status, await resp.read()


@pytest.mark.parametrize("header", ["Authorization", "x-api-key"])
async def test_no_or_a_wrong_key_gets_401_on_mcp_and_a2a_and_is_never_echoed(
    tmp_path: Path, header: str, caplog: pytest.LogCaptureFixture
) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(key_line("acme", ACME_KEY))
    auth = {"mode": "api_key", "keys_file": str(keys)}

    def presented(key: str) -> dict[str, str]:
        return {header: f"Bearer {key}" if header == "Authorization" else key}

    caplog.set_level(logging.DEBUG)
    async with (
        serve_asgi(demo_tools("east").streamable_http_app()) as mcp,
        recording_agent() as (agent, seen),
        gateway(tmp_path, mcp, agent, auth) as (public, running, admin),
        aiohttp.ClientSession() as http,
    ):
        routes = [
            ("POST", f"http://{public}/mcp", {"json": tools_call(1)}),
            ("GET", f"http://{public}/a2a/planner/.well-known/agent-card.json", {}),
            ("POST", f"http://{public}/a2a/planner/", {"json": {"jsonrpc": "2.0", "id": 1}}),
        ]
        for method, url, kw in routes:
            for headers in ({}, presented(WRONG_KEY), presented(""), {"x-grid-tenant": "acme"}):
                status, body = await _status_and_body(http, method, url, headers, **kw)
                assert status == 401, (url, headers)
                assert json.loads(body)["error"]["code"] == "unauthenticated"
                assert WRONG_KEY.encode() not in body and b"grid-acme" not in body
        assert seen == [] and running.meter.calls == {}, "no provider was contacted"
        # The right key passes on both routes, so the refusals above were the key's.
        async with sdk_client(public, presented(ACME_KEY)) as client:
            answer = await client.call_tool("calculator", {"expression": "2*3"})
            assert answer.structured_content == {"result": 6.0}
        status, _ = await _status_and_body(http, *routes[1][:2], presented(ACME_KEY))
        assert status == 200 and seen == ["/.well-known/agent-card.json"]
        assert running.meter.calls[("acme", "tools", "mcp_tool")] == 1
        metrics = (await _status_and_body(http, "GET", f"http://{admin}/metrics", {}))[1]
    logged = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    for key in (ACME_KEY, WRONG_KEY):
        assert key not in logged and key.encode() not in metrics
