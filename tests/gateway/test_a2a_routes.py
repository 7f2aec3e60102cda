"""``/a2a/{agent}`` through one gateway (§16) with a2a-sdk on both sides: the SDK's
client resolves the demo planner's card through the gateway, and because the gateway
points the card's interfaces back at itself, the client's calls come through it too,
streamed (Server-Sent Events) and not. Hostile cards are refused, never relayed."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from grid.core.overlay.ids import stable_id
from grid.demo.a2a_agent import plan_text
from grid.gateway.agent_card import rewrite_card
from grid.gateway.config import load_config
from grid.gateway.server import Gateway
from grid.gateway.settings import GatewaySettings
from grid.testing.agent_servers import ask_agent, serve_agent
from grid.testing.gateway import Upstream, overlay, render_praxis
from grid.testing.hostile_mcp import agent_card_app


def agent(name: str, cluster: str, site: str = "east") -> dict[str, Any]:
    return {
        "kind": "a2a_agent",
        "name": name,
        "site": site,
        "cluster": cluster,
        "fresh": True,
        "stable_id": stable_id("a2a_agent", name, site, cluster),
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
) -> AsyncIterator[tuple[str, Gateway]]:
    rendered, public, _admin = render_praxis(overlay(*candidates), upstreams, tmp)
    path = tmp / "praxis.yaml"
    path.write_text(rendered.text)
    running = Gateway(load_config(path, 1 << 20), GatewaySettings(), path)
    await running.start()
    try:
        yield public, running
    finally:
        await running.stop()


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("streaming", [True, False])
async def test_an_sdk_client_asks_the_planner_through_the_gateway(
    tmp_path: Path, streaming: bool
) -> None:
    async with serve_agent("west") as address:
        candidates = [agent("planner", "planner-west", site="west")]
        ups = [upstream("planner-west", address)]
        async with gateway(tmp_path, candidates, ups) as (public, running):
            base = f"http://{public}/a2a/planner"
            card, answer = await ask_agent(base, "ship the release", streaming=streaming)
            assert answer == plan_text("ship the release", "west")
            assert [i.url for i in card.supported_interfaces] == [f"{base}/"]
            assert card.capabilities.streaming
            calls = running.meter.calls
            assert calls == {("other", "planner-west", "a2a_agent"): 1}  # came through


async def test_a_streamed_answer_passes_through_as_server_sent_events(tmp_path: Path) -> None:
    async with serve_agent("east") as address:
        ups = [upstream("planner", address)]
        async with (
            gateway(tmp_path, [agent("planner", "planner")], ups) as (public, _),
            aiohttp.ClientSession() as http,
        ):
            message = {"role": "ROLE_USER", "parts": [{"text": "plan"}], "messageId": "m1"}
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage"}
            body["params"] = {"message": message}
            headers = {"A2A-Version": "1.0"}
            url = f"http://{public}/a2a/planner/"
            async with http.post(url, json=body, headers=headers) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                text = (await resp.read()).decode()
        events = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
        assert events and events[-1]["id"] == 1
        parts = events[-1]["result"]["message"]["parts"]
        assert parts[0]["text"] == plan_text("plan", "east")


def test_every_interface_url_is_pointed_back_at_the_gateway() -> None:
    base = "http://gw:8080/a2a/planner"
    card = {
        "name": "planner",
        "url": "http://10.0.0.5:9999/rpc?x=1",
        "additionalInterfaces": [
            {"url": "http://10.0.0.5:9999/rest", "transport": "HTTP+JSON"},
            {"url": "10.0.0.5:50051", "transport": "GRPC"},
        ],
        "supportedInterfaces": [
            {"url": "https://agent.example/", "protocolBinding": "JSONRPC"},
            {"url": "agent.example:443", "protocolBinding": "GRPC"},
            {"url": "file:///etc/passwd", "protocolBinding": "JSONRPC"},
        ],
        "signatures": [{"protected": "x", "signature": "y"}],
        "skills": [{"id": "plan"}],
    }
    out = rewrite_card(card, base)
    assert out["url"] == f"{base}/rpc?x=1"
    assert out["additionalInterfaces"] == [{"url": f"{base}/rest", "transport": "HTTP+JSON"}]
    assert out["supportedInterfaces"] == [{"url": f"{base}/", "protocolBinding": "JSONRPC"}]
    assert "signatures" not in out and out["skills"] == [{"id": "plan"}]
    assert "url" not in rewrite_card({"url": "grpc-host:1"}, base)


@pytest.mark.parametrize(
    "body",
    [
        lambda: b'{"name": "' + b"x" * (100 * 1024 * 1024) + b'"}',
        lambda: b"[" * 100_000 + b"]" * 100_000,
        lambda: b'{"name": ' * 40 + b"1" + b"}" * 40,
        lambda: b"not json",
        lambda: b'["a", "list"]',
    ],
)
async def test_a_hostile_card_is_refused_not_relayed(
    tmp_path: Path, body: Callable[[], bytes]
) -> None:
    payload = body()
    async with serve(agent_card_app(lambda: payload)) as address:
        ups = [upstream("planner", address)]
        async with (
            gateway(tmp_path, [agent("planner", "planner")], ups) as (public, _),
            aiohttp.ClientSession() as http,
        ):
            url = f"http://{public}/a2a/planner/.well-known/agent-card.json"
            async with asyncio.timeout(60), http.get(url) as resp:
                assert resp.status == 502
                assert (await resp.json())["error"]["code"] == "invalid_agent_card"


async def test_the_mcp_path_is_a_setting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mcp_path"):
        GatewaySettings(mcp_path="/v1/mcp")
    with pytest.raises(ValueError, match="mcp_path"):
        GatewaySettings(mcp_path="/tools/../mcp")
    rendered, public, _admin = render_praxis(overlay(), [], tmp_path)
    path = tmp_path / "praxis.yaml"
    path.write_text(rendered.text)
    running = Gateway(load_config(path, 1 << 20), GatewaySettings(mcp_path="/tools/mcp"), path)
    await running.start()
    try:
        async with aiohttp.ClientSession() as http:
            ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
            async with http.post(f"http://{public}/tools/mcp", json=ping) as resp:
                assert resp.status == 200 and (await resp.json())["result"] == {}
            async with http.post(f"http://{public}/mcp", json=ping) as resp:
                assert resp.status == 404
    finally:
        await running.stop()


def budget_view(path: Path, ratio: float) -> None:
    view = {"network": "net", "budgets": [{"tenant_id": "acme", "spend_ratio": ratio}]}
    path.write_text(json.dumps(view | {"generated_at": "2026-01-01T00:00:00Z"}))


async def test_a_tenant_out_of_calls_is_refused_on_the_next_one(tmp_path: Path) -> None:
    from grid.testing.poll import eventually

    budget = 2
    budgets = tmp_path / "grid-budgets.json"
    budget_view(budgets, 0.0)
    async with serve_agent("east") as address:
        rendered, public, _admin = render_praxis(
            overlay(agent("planner", "planner")), [upstream("planner", address)], tmp_path
        )
        path = tmp_path / "praxis.yaml"
        path.write_text(rendered.text)
        settings = GatewaySettings(budgets_file=str(budgets))
        running = Gateway(load_config(path, 1 << 20), settings, path)
        await running.start()
        try:
            base = f"http://{public}/a2a/planner"
            for _ in range(budget):
                await ask_agent(base, "go", headers={"x-grid-tenant": "acme"})
            assert running.meter.calls[("acme", "planner", "a2a_agent")] == budget
            budget_view(budgets, 1.0)  # what the operator writes once the calls are spent
            await eventually(lambda: running.meter.is_exhausted("acme"), "the view is taken")
            async with aiohttp.ClientSession() as http:
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}
                headers = {"x-grid-tenant": "acme"}
                async with http.post(f"{base}/", json=body, headers=headers) as resp:
                    assert resp.status == 429
                    assert (await resp.json())["error"]["code"] == "budget_exhausted"
            assert running.meter.calls[("acme", "planner", "a2a_agent")] == budget
        finally:
            await running.stop()
