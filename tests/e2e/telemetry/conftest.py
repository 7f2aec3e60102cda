"""Fixtures for the telemetry reliability tests: real gateway processes over real mTLS.

`pki` issues, once per session, a gateway certificate and `AGENT_COUNT` agent
certificates (CN ``agent-NNN``) from one dev CA. `gateways` starts
``grid telemetry-gateway`` processes on 127.0.0.1 and waits for their readiness
line; each can be SIGKILLed or stopped, and all are stopped at teardown. `nats`
is a fresh ``nats-server -js`` per test, so the gateway's default stream and
bucket names never see another test's data. `stored` reads the backbone back
through ``grid telemetry records -o json``, the audit command.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grid.demo.pki import DevCA
from grid.telemetry.backbones import open_roster
from grid.testing.nats_server import NatsServer

AGENT_COUNT = 300
READY_TIMEOUT_S = 30.0
GRID = [sys.executable, "-m", "grid"]


@dataclass(frozen=True)
class Pki:
    """The CA, the gateway's server certificate and the agents' client certificates."""

    ca: Path
    server_cert: Path
    server_key: Path
    agents: list[tuple[str, Path, Path]]
    """(agent ID, cert, key) per agent."""

    def client_context(self, index: int) -> ssl.SSLContext:
        """A client TLS context for agent ``index``."""
        _, cert, key = self.agents[index]
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(cert), str(key))
        return context


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """One CA, a gateway certificate and `AGENT_COUNT` distinct agent certificates."""
    directory = tmp_path_factory.mktemp("telemetry-pki")
    ca = DevCA()
    (directory / "ca.pem").write_bytes(ca.cert_pem)
    server = ca.issue("telemetry-gateway")
    (directory / "gateway.pem").write_bytes(server.cert_pem)
    (directory / "gateway-key.pem").write_bytes(server.key_pem)
    agents = []
    for i in range(AGENT_COUNT):
        name = f"agent-{i:03d}"
        issued = ca.issue(name)
        cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
        cert.write_bytes(issued.cert_pem)
        key.write_bytes(issued.key_pem)
        agents.append((name, cert, key))
    return Pki(
        directory / "ca.pem", directory / "gateway.pem", directory / "gateway-key.pem", agents
    )


class GatewayProcess:
    """One ``grid telemetry-gateway`` process."""

    def __init__(self, proc: asyncio.subprocess.Process, address: str, log: Path) -> None:
        self.proc = proc
        self.address = address
        self.log = log

    @property
    def port(self) -> int:
        """The listening port."""
        return int(self.address.rpartition(":")[2])

    async def kill(self) -> None:
        """SIGKILL the process and reap it."""
        if self.proc.returncode is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> int:
        """SIGTERM, then SIGKILL if it does not exit within 10 s; the exit code."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                await self.kill()
        return self.proc.returncode or 0


class Gateways:
    """Starts gateway processes against a data dir and backbone; stops them all at the end."""

    def __init__(self, pki: Pki, tmp_path: Path) -> None:
        self.pki = pki
        self.tmp_path = tmp_path
        self.started: list[GatewayProcess] = []

    async def start(
        self, data_dir: Path, backbone: str, listen: str = "127.0.0.1:0", **settings: Any
    ) -> GatewayProcess:
        """Start a gateway and wait for its single readiness line."""
        args = [*GRID, "telemetry-gateway", "--listen", listen, "--cert", str(self.pki.server_cert)]
        args += ["--key", str(self.pki.server_key), "--client-ca", str(self.pki.ca)]
        args += ["--data-dir", str(data_dir), "--backbone", backbone, "--gateway-id", "gw-e2e"]
        for name, value in settings.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        log = self.tmp_path / f"gateway-{len(self.started)}.log"
        with log.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                *args, stdout=asyncio.subprocess.PIPE, stderr=err
            )
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), READY_TIMEOUT_S)
            address = json.loads(line)["listening"]
        except (TimeoutError, ValueError, KeyError) as exc:
            proc.kill()
            await proc.wait()
            raise AssertionError(f"gateway did not start: {log.read_text()[-2000:]}") from exc
        gateway = GatewayProcess(proc, address, log)
        self.started.append(gateway)
        return gateway

    async def close(self) -> None:
        """Stop every gateway still running."""
        for gateway in self.started:
            await gateway.stop()


@pytest.fixture
async def gateways(pki: Pki, tmp_path: Path) -> AsyncIterator[Gateways]:
    """Gateway processes for one test, all stopped afterwards."""
    started = Gateways(pki, tmp_path)
    try:
        yield started
    finally:
        await started.close()


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsServer]:
    """A fresh nats-server with JetStream for one test."""
    server = NatsServer(tmp_path / "nats-store")
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def admit_agents(backbone: str, data_dir: Path, agent_ids: list[str]) -> None:
    """Register and admit agents (tenant ``tenant-e2e``) in the backbone's roster."""
    roster = await open_roster(backbone, data_dir)
    try:
        for agent_id in agent_ids:
            await roster.append(agent_id, "registered", "tenant-e2e")
            await roster.append(agent_id, "admitted", "tenant-e2e")
    finally:
        await roster.close()


async def stored(backbone: str, data_dir: Path) -> list[dict[str, Any]]:
    """Every durably published record, via ``grid telemetry records -o json``."""
    proc = await asyncio.create_subprocess_exec(
        *GRID, "telemetry", "records", "--data-dir", str(data_dir), "--backbone", backbone,
        "-o", "json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return [json.loads(line) for line in out.decode().splitlines() if line.strip()]
