"""Fixtures of the gateway tests: upstreams, gateway processes and TLS files, always stopped."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from grid.demo.pki import DevCA
from grid.testing.gateway import GatewayProcess, TlsFiles, spawn_gateway


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def gateways() -> AsyncIterator[Callable[..., Awaitable[GatewayProcess]]]:
    running: list[GatewayProcess] = []

    async def run(config_path: Path, public: str, admin: str, *extra: str) -> GatewayProcess:
        gateway = await spawn_gateway(config_path, public, admin, *extra)
        running.append(gateway)
        return gateway

    yield run
    for gateway in running:
        await gateway.stop()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """``ca.crt``, ``tls.crt``, ``tls.key`` (the gateway's) and a server pair, on disk."""
    directory = tmp_path_factory.mktemp("tls")
    ca = DevCA()
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    for name, site in (("tls", "east"), ("server", "west")):
        issued = ca.issue_site(site)
        (directory / f"{name}.crt").write_bytes(issued.cert_pem)
        (directory / f"{name}.key").write_bytes(issued.key_pem)
    return TlsFiles(directory, ca)
