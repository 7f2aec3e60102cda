"""The agent controller: discovery drives the phase, status and what the site offers."""

from __future__ import annotations

import asyncio
import random
import ssl
from collections.abc import Mapping
from typing import Any

from grid.adapters.agent_discovery import DiscoveryError
from grid.core.crdt.offer import AgentOffer
from grid.core.resources import AgentProvider, parse_resource
from grid.core.resources.agent_spec import AgentCardSpec, ToolSpec
from grid.operator.agents import AgentController, Found
from grid.testing.store import InMemoryStore


def tools(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "AgentToolProvider",
        "metadata": {"name": "tools-east"},
        "spec": {
            "gridNetworkRef": "grid-demo",
            "endpoint": "http://tools:8000/mcp",
            "healthCheck": {"interval": "100ms", "timeout": "50ms"},
            **spec,
        },
    }


def agent() -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "AgentToAgentProvider",
        "metadata": {"name": "planner"},
        "spec": {
            "gridNetworkRef": "grid-demo",
            "endpoint": "http://planner:9000",
            "accessPolicy": {"siteSelector": {"matchLabels": {"tier": "prod"}}},
            "healthCheck": {"interval": "100ms", "timeout": "50ms"},
        },
    }


class Servers:
    """Discovery answers a test can switch: up (tools or a card) or refusing."""

    def __init__(self) -> None:
        self.up = True
        self.seen_headers: list[dict[str, str]] = []

    async def discover(
        self, provider: AgentProvider, headers: Mapping[str, str], tls: ssl.SSLContext | None
    ) -> Found:
        self.seen_headers.append(dict(headers))
        if not self.up:
            raise DiscoveryError("Unreachable", "the endpoint refused the connection")
        if provider.kind == "AgentToolProvider":
            return [ToolSpec(name="search"), ToolSpec(name="calculator")]
        return AgentCardSpec(modalities=["text/plain"], skills=["plan-trip"])


async def until(predicate: Any, deadline_s: float = 10.0) -> None:
    async with asyncio.timeout(deadline_s):
        while not predicate():
            await asyncio.sleep(0.02)


async def started(objs: list[dict[str, Any]]) -> tuple[InMemoryStore, AgentController, Servers]:
    store = InMemoryStore()
    for obj in objs:
        await store.create(obj)
    servers = Servers()
    controller = AgentController(
        store, lambda: None, discover=servers.discover, rng=random.Random(7)
    )
    controller.sync([parse_resource(o) for o in objs])  # type: ignore[misc]
    return store, controller, servers


async def test_discovered_tools_are_offered_and_written_to_status() -> None:
    store, controller, _servers = await started([tools(), agent()])
    try:
        await until(lambda: len(controller.offers("tools")) == 2)
        assert controller.offers("tools") == {
            AgentOffer("tools", "tools-east", "search"),
            AgentOffer("tools", "tools-east", "calculator"),
        }
        assert controller.offers("agents") == {
            AgentOffer("agents", "planner", "planner", (("tier", "prod"),))
        }
        status = (await store.get("AgentToolProvider", "tools-east"))["status"]
        assert status["phase"] == "Available" and status["reason"] == "Discovered"
        assert [t["name"] for t in status["tools"]] == ["search", "calculator"]
        card = (await store.get("AgentToAgentProvider", "planner"))["status"]["agentCard"]
        assert card == {"modalities": ["text/plain"], "skills": ["plan-trip"]}
    finally:
        await controller.stop()


async def test_a_dead_server_leaves_the_offer_and_comes_back() -> None:
    store, controller, servers = await started([tools()])
    try:
        await until(lambda: len(controller.offers("tools")) == 2)
        servers.up = False
        await until(lambda: not controller.offers("tools"))
        status = (await store.get("AgentToolProvider", "tools-east"))["status"]
        assert status["phase"] == "Unavailable" and status["reason"] == "Unreachable"
        servers.up = True
        await until(lambda: len(controller.offers("tools")) == 2)
        assert (await store.get("AgentToolProvider", "tools-east"))["status"]["phase"] in (
            "Available",
            "Degraded",
        )
    finally:
        await controller.stop()


async def test_a_bearer_credential_comes_from_its_secret_and_a_missing_one_is_not_offered() -> None:
    auth = {"strategy": "bearer_token", "secretRef": {"name": "t", "namespace": "ns", "key": "k"}}
    store, controller, servers = await started([tools(auth=auth)])
    try:
        await until(lambda: bool(controller.states()[0].reason == "SecretUnresolved"))
        assert not controller.offers("tools")
        await store.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "t", "namespace": "ns"},
                "stringData": {"k": "sk-test"},
            },
        )
        await until(lambda: len(controller.offers("tools")) == 2)
        assert {"Authorization": "Bearer sk-test"} in servers.seen_headers
    finally:
        await controller.stop()
