"""An operator on the Kubernetes store discovers an AgentToolProvider and an
AgentToAgentProvider, writes their status, and offers them in its OR-Sets."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from grid.core.crdt.offer import AgentOffer, origin_offers
from grid.demo.mesh import DemoMesh
from grid.demo.plan import NETWORK
from grid.operator.runtime import Operator
from grid.operator.settings import OperatorSettings
from grid.testing.hostile_mcp import agent_card_app, hostile_mcp_app, tools_result
from grid.testing.kube_api import KubeApiEmulator, connect_store
from grid.testing.poll import eventually

from .test_kubernetes_watch import _copy_demo_store

CARD = {"name": "planner", "skills": [{"id": "plan-trip", "name": "Plan"}]}


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def agent_objects(mcp: str, a2a: str) -> list[dict[str, Any]]:
    check = {"interval": "1s", "timeout": "1s"}
    meta = {"labels": {"grid.praxis-proxy.io/site": "east"}}
    return [
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "AgentToolProvider",
            "metadata": {"name": "tools-east", **meta},
            "spec": {"gridNetworkRef": NETWORK, "endpoint": f"{mcp}/mcp", "healthCheck": check},
        },
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "AgentToAgentProvider",
            "metadata": {"name": "planner", **meta},
            "spec": {"gridNetworkRef": NETWORK, "endpoint": a2a, "healthCheck": check},
        },
    ]


async def test_agents_are_discovered_written_and_offered(
    tmp_path: Path, kube_audit: Counter[Any]
) -> None:
    mesh = DemoMesh(tmp_path, ["east"])
    await mesh.prepare()
    emulator = KubeApiEmulator()
    await emulator.start()
    harness = await connect_store(emulator, tmp_path, agent="grid-test-harness")
    store = await connect_store(emulator, tmp_path, event_namespace="grid")
    await _copy_demo_store(mesh, harness)
    await harness.delete("AgentToolProvider", "tools-east")  # the demo's: this test's own instead
    tools = hostile_mcp_app(lambda: tools_result(["search", "calculator"]))
    card = agent_card_app(lambda: json.dumps(CARD).encode())
    async with serve(tools) as mcp, serve(card) as a2a:
        for obj in agent_objects(mcp, a2a):
            await harness.create(obj)
        settings = OperatorSettings(
            site="east", store="kubernetes", swim_bind="127.0.0.1:0", metrics_bind="127.0.0.1:0"
        )
        operator = Operator(settings, store)
        task = asyncio.create_task(operator.run())

        async def discovered() -> bool:
            assert not task.done(), task
            tool = await harness.get("AgentToolProvider", "tools-east")
            agent = await harness.get("AgentToAgentProvider", "planner")
            card = (agent.get("status") or {}).get("agentCard") or {}
            phase = (tool.get("status") or {}).get("phase")
            return phase == "Available" and card.get("skills") == ["plan-trip"]

        async def offered() -> bool:
            found = origin_offers(operator.replica, "tools")
            return {o.name for _site, o in found} == {"search", "calculator"} and origin_offers(
                operator.replica, "agents"
            ) == [("east", AgentOffer("agents", "planner", "planner"))]

        try:
            await eventually(discovered, "both agents discovered", timeout_s=30)
            await eventually(offered, "the tools and the agent in the OR-Sets", timeout_s=30)
            status = (await harness.get("AgentToolProvider", "tools-east"))["status"]
            assert [t["name"] for t in status["tools"]] == ["search", "calculator"]

            async def site_shows_them() -> bool:
                site = await harness.get("GridSite", "east")
                caps = (site.get("status") or {}).get("capabilities") or {}
                return (
                    caps.get("agentTools") is True
                    and caps.get("agentToAgent") is True
                    and [t["name"] for t in caps.get("tools", [])] == ["calculator", "search"]
                    and caps.get("agents") == [{"name": "planner"}]
                )

            await eventually(site_shows_them, "the GridSite status shows them", timeout_s=30)

            def rendered() -> set[tuple[str, str, str]]:
                found = set()
                for config_map in emulator.objects_of("ConfigMap"):
                    document = (config_map.get("data") or {}).get("grid-config.json")
                    if document:
                        found |= {
                            (c["kind"], c["name"], c["cluster"])
                            for c in json.loads(document)["candidates"]
                        }
                return found

            tool_and_agent = {
                ("mcp_tool", "search", "tools-east"),
                ("mcp_tool", "calculator", "tools-east"),
                ("a2a_agent", "planner", "planner"),
            }
            await eventually(
                lambda: tool_and_agent <= rendered(), "the overlay holds them", timeout_s=30
            )
        finally:
            operator.stop()
            await asyncio.wait_for(task, 30)
            kube_audit.update(emulator.audit)
            await store.close()
            await harness.close()
            await emulator.stop()
