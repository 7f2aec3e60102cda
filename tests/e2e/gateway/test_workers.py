"""``grid gateway --workers 2`` as real processes: one port, summed metrics, restarts, stop."""

from __future__ import annotations

import json
import os
import re
import signal
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grid.demo.mock_provider import MockProvider, MockSettings
from grid.gateway.config import load_config
from grid.gateway.server import Gateway
from grid.gateway.settings import GatewaySettings
from grid.gateway.signals_poll import SiteCredentials
from grid.gateway.workers import Supervisor
from grid.testing.gateway import (
    MODEL,
    GatewayProcess,
    TlsFiles,
    Upstream,
    candidate,
    overlay,
    render_praxis,
)
from grid.testing.poll import eventually

pytestmark = pytest.mark.e2e

Gateways = Callable[..., Awaitable[GatewayProcess]]
ROUTED = re.compile(r'^grid_gateway_requests_total\{outcome="routed"\} ([0-9.e+]+)$', re.M)
TOKENS = re.compile(r"^grid_gateway_tenant_tokens_total\{[^}]*\} ([0-9.e+]+)$", re.M)


@pytest.fixture
async def provider() -> AsyncIterator[Upstream]:
    """The mock provider (in this process) as the cluster ``c1``."""
    mock = MockProvider(MockSettings(model=MODEL, service_time_s=0.0, capacity=64))
    _host, port = await mock.start()
    upstream = Upstream("c1")
    upstream.port = port
    yield upstream
    await mock.stop()


async def _start(gateways: Gateways, tmp: Path, provider: Upstream, *extra: str) -> GatewayProcess:
    rendered, public, admin = render_praxis(overlay(candidate("c1")), [provider], tmp)
    path = tmp / "praxis.yaml"
    path.write_text(rendered.text)
    return await gateways(path, public, admin, "--workers", "2", *extra)


def _sum(pattern: re.Pattern[str], text: str) -> int:
    return int(sum(float(v) for v in pattern.findall(text)))


async def _text(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(url) as resp:
        assert resp.status == 200
        return await resp.text()


async def _send(gateway: GatewayProcess, n: int) -> int:
    """``n`` chat requests, each on a new connection (so the kernel spreads them over
    the workers); returns the tokens their answers reported."""
    tokens = 0
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as http:
        for i in range(n):
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"hello {i}"}]}
            async with http.post(gateway.url(), json=body) as resp:
                assert resp.status == 200, await resp.text()
                usage = (await resp.json())["usage"]
                tokens += usage["prompt_tokens"] + usage["completion_tokens"]
    return tokens


async def _workers(http: aiohttp.ClientSession, gateway: GatewayProcess) -> list[dict[str, Any]]:
    return list((await gateway.snapshot(http))["workers"])


async def _routed_when(http: aiohttp.ClientSession, gateway: GatewayProcess, n: int) -> str:
    """Poll the supervisor's /metrics until it counts ``n`` routed requests; its text."""

    async def counted() -> str | None:
        text = await gateway.metrics(http)
        assert _sum(ROUTED, text) <= n, text  # never more than were sent
        return text if _sum(ROUTED, text) == n else None

    return await eventually(counted, f"{n} routed requests in /metrics")  # type: ignore[arg-type]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_two_workers_share_the_port_and_admin_metrics_count_every_request(
    tmp_path: Path, provider: Upstream, gateways: Gateways
) -> None:
    gateway = await _start(gateways, tmp_path, provider)
    n = 40
    async with aiohttp.ClientSession() as http:
        workers = await _workers(http, gateway)
        assert [w["serving"] for w in workers] == [True, True]
        assert len({w["pid"] for w in workers}) == 2
        tokens = await _send(gateway, n)
        text = await _routed_when(http, gateway, n)
        assert _sum(TOKENS, text) == tokens
        assert "grid_gateway_workers 2.0" in text
        # Both workers served (the sum is a sum), and their own counts add up to it.
        own = [_sum(ROUTED, await _text(http, f"http://{w['admin']}/metrics")) for w in workers]
        assert sum(own) == n and min(own) > 0, own
    # SIGTERM to the supervisor stops every worker, and it exits 0.
    assert await gateway.stop() == 0
    for worker in workers:
        await eventually(lambda pid=worker["pid"]: _gone(pid), f"worker {worker['pid']} gone")


async def test_a_killed_worker_is_restarted_and_the_counters_do_not_drop(
    tmp_path: Path, provider: Upstream, gateways: Gateways
) -> None:
    gateway = await _start(gateways, tmp_path, provider)
    async with aiohttp.ClientSession() as http:
        first = await _send(gateway, 20)
        await _routed_when(http, gateway, 20)  # the supervisor has read every worker
        victim = (await _workers(http, gateway))[0]
        os.kill(victim["pid"], signal.SIGKILL)

        async def replaced() -> bool:
            slot = (await _workers(http, gateway))[0]
            return bool(slot["serving"] and slot["pid"] != victim["pid"])

        await eventually(replaced, "worker 0 restarted", timeout_s=30)  # type: ignore[arg-type]
        text = await gateway.metrics(http)
        assert _sum(ROUTED, text) == 20 and _sum(TOKENS, text) == first
        assert "grid_gateway_worker_restarts_total 1.0" in text
        second = await _send(gateway, 10)
        text = await _routed_when(http, gateway, 30)
        assert _sum(TOKENS, text) == first + second


async def test_a_graceful_stop_saves_the_sum_of_the_workers_counters(
    tmp_path: Path, provider: Upstream, gateways: Gateways
) -> None:
    state = tmp_path / "state"
    gateway = await _start(gateways, tmp_path, provider, "--state-dir", str(state))
    tokens = await _send(gateway, 12)
    async with aiohttp.ClientSession() as http:
        await _routed_when(http, gateway, 12)
    assert await gateway.stop() == 0
    saved = json.loads((state / "tenant-tokens.json").read_text())["tokens"]
    assert sum(row[3] for row in saved) == tokens
    # The next start takes them up: the counter the operator prices does not drop.
    (tmp_path / "again").mkdir()
    again = await _start(gateways, tmp_path / "again", provider, "--state-dir", str(state))
    async with aiohttp.ClientSession() as http:
        assert _sum(TOKENS, await again.metrics(http)) == tokens
    assert not (state / "tenant-tokens.json").exists()


async def test_only_the_first_worker_reports_ingest_feedback(
    tmp_path: Path, tls_files: TlsFiles
) -> None:
    unused = Upstream("c1", port=1)  # never contacted: nothing is started
    rendered, _public, _admin = render_praxis(overlay(candidate("c1")), [unused], tmp_path)
    path = tmp_path / "praxis.yaml"
    path.write_text(rendered.text)
    tls = tls_files.directory
    credentials = SiteCredentials(tls / "tls.crt", tls / "tls.key", tls / "ca.crt")
    supervisor = Supervisor(
        load_config(path, 1 << 20), GatewaySettings(), path, ["true"], 2,
        operator="127.0.0.1:1", credentials=credentials,
    )  # fmt: skip
    specs = [slot.spec for slot in supervisor.slots]
    assert [s.settings.feedback_enabled for s in specs] == [True, False]
    assert [s.settings.listener.connections_max for s in specs] == [512, 512]
    assert all(s.settings.reuse_port for s in specs)
    quiet = Gateway(load_config(path, 1 << 20), specs[1].settings, path, "127.0.0.1:1", credentials)
    assert quiet.reports is None and quiet.signals is not None  # it still polls
    loud = Gateway(load_config(path, 1 << 20), specs[0].settings, path, "127.0.0.1:1", credentials)
    assert loud.reports is not None
    await supervisor.stop()  # never started: removes its private directory
    assert not list(Path(tempfile.gettempdir()).glob(f"grid-gateway-workers-{os.getpid()}-*"))
