"""Fixtures for the telemetry gateway: a dev PKI, fakes, a gateway on 127.0.0.1:0, clients."""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from grid.core.telemetry.settings import GatewaySettings
from grid.demo.pki import DevCA, Issued
from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import EventBatch, InventoryBatch
from grid.telemetry.server import TelemetryGateway, server_ssl_context
from grid.testing.telemetry import MemoryBackbone, MemoryRosterLog


@dataclass(frozen=True)
class Pki:
    """Files of a dev PKI: the CA, the gateway's server cert, and agent client certs."""

    directory: Path
    ca: Path
    server_cert: Path
    server_key: Path
    agents: dict[str, tuple[Path, Path]]


AGENTS: dict[str, tuple[str, str | None]] = {
    # name: (common name, spiffe path)
    "spiffe": ("ignored-cn", "agent/a1"),
    "cn": ("cn-agent", None),
    "other": ("other-agent", None),
    "stranger": ("stranger", None),
}
AGENT_IDS = {"spiffe": "spiffe://grid.local/agent/a1", "cn": "cn-agent", "other": "other-agent"}


def _write(directory: Path, name: str, issued: Issued) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    cert.write_bytes(issued.cert_pem)
    key.write_bytes(issued.key_pem)
    return cert, key


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """One dev CA per session with a server cert and the agent certs above."""
    directory = tmp_path_factory.mktemp("pki")
    ca = DevCA()
    (directory / "ca.pem").write_bytes(ca.cert_pem)
    server_cert, server_key = _write(directory, "gateway", ca.issue("gateway"))
    agents = {
        name: _write(directory, name, ca.issue(cn, spiffe_path=path))
        for name, (cn, path) in AGENTS.items()
    }
    return Pki(directory, directory / "ca.pem", server_cert, server_key, agents)


@dataclass
class Harness:
    """A started gateway with its fakes and client helpers."""

    gateway: TelemetryGateway
    backbone: Any
    roster: Any
    pki: Pki
    sessions: dict[str, aiohttp.ClientSession] = field(default_factory=dict)

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = (self.gateway.address or "").rpartition(":")
        return host, int(port)

    def client_context(self, agent: str) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        cert, key = self.pki.agents[agent]
        context.load_cert_chain(cert, key)
        return context

    async def post(
        self,
        agent: str,
        route: str,
        body: bytes,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """POST a body as ``agent``; return status, headers and body."""
        if agent not in self.sessions:
            connector = aiohttp.TCPConnector(ssl=self.client_context(agent))
            self.sessions[agent] = aiohttp.ClientSession(connector=connector)
        _, port = self.host_port
        all_headers = {"Content-Type": "application/x-protobuf", **(headers or {})}
        async with self.sessions[agent].post(
            f"https://localhost:{port}/v1/{route}", data=body, headers=all_headers
        ) as response:
            return response.status, CIMultiDict(response.headers), await response.read()  # type: ignore[return-value]

    async def close(self) -> None:
        for session in self.sessions.values():
            await session.close()
        await self.gateway.stop()


async def admit(roster: Any, agent_id: str, tenant: str = "tenant-1") -> None:
    """Register and admit an agent."""
    await roster.append(agent_id, "registered", tenant)
    await roster.append(agent_id, "admitted", tenant)


@pytest.fixture
async def start_gateway(pki: Pki) -> AsyncIterator[Callable[..., Any]]:
    """Start gateways with the given settings over fakes; stop them after the test."""
    started: list[Harness] = []

    async def start(
        backbone: Any = None,
        roster: Any = None,
        wall_ns: Callable[[], int] = time.time_ns,
        **kw: Any,
    ) -> Harness:
        backbone = backbone if backbone is not None else MemoryBackbone()
        roster = roster if roster is not None else MemoryRosterLog()
        settings = GatewaySettings(listen="127.0.0.1:0", **kw)
        context = server_ssl_context(str(pki.server_cert), str(pki.server_key), str(pki.ca))
        gateway = TelemetryGateway(settings, backbone, roster, context, "gw-test", wall_ns=wall_ns)
        await gateway.start()
        harness = Harness(gateway, backbone, roster, pki)
        started.append(harness)
        return harness

    yield start
    for harness in started:
        await harness.close()


def events(count: int = 1, observed_ns: int | None = None, prefix: str = "r") -> EventBatch:
    """A valid EventBatch of ``count`` events observed now (or at ``observed_ns``)."""
    batch = EventBatch(protocol_version=1, schema_version=1)
    ns = time.time_ns() if observed_ns is None else observed_ns
    for i in range(count):
        event = batch.events.add(record_id=f"{prefix}{i}", type="cpu", payload=b"p")
        event.observed_at.seconds, event.observed_at.nanos = divmod(ns, 1_000_000_000)
    return batch


def inventory(count: int = 1) -> InventoryBatch:
    """A valid InventoryBatch of ``count`` records observed now."""
    batch = InventoryBatch(protocol_version=1, schema_version=1)
    for i in range(count):
        record = batch.records.add(record_id=f"i{i}", type="host")
        record.observed_at.seconds, record.observed_at.nanos = divmod(time.time_ns(), 10**9)
    return batch
