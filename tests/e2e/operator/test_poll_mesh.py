"""Poll mode end to end: three real operator processes pulling each other's signals.

The module's mesh runs with ``signalTransport.mode: poll`` (providers scraped
and peers polled every 1 s). Each site serves its own signals on the mTLS
listener, pulls every alive peer, and renders with local scoring off. A last
test starts a one-site gossip mesh and declares poll: the operator exits and
the demo supervisor restarts it into poll.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from grid.adapters.tls_probe import client_context
from grid.demo.mesh import DemoMesh
from grid.demo.plan import MODEL
from grid.testing.poll import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

SITES = ["east", "west", "central"]
POLL_INTERVAL_S = 1.0
SCRAPE_INTERVAL_S = 1.0
CONVERGE_TIMEOUT_S = 25.0
LOAD_WORKERS = 24
"""Requests in flight at vllm-central: capacity 4, so 20 wait and its queue ratio
(20 over a queueCapacity of 16) is 1, past the 0.98 Excluded threshold."""
PROPAGATION_BOUND_S = SCRAPE_INTERVAL_S + 2 * POLL_INTERVAL_S + 1.0 + 1.0
"""A scrape, two polls, a second for rendering and a second of slack on a busy machine."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def poll_mesh(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DemoMesh]:
    """A running three-site mesh in poll mode; stopped at teardown."""
    demo = DemoMesh(
        tmp_path_factory.mktemp("poll-mesh"),
        SITES,
        signal_transport="poll",
        signals_poll_interval_s=POLL_INTERVAL_S,
    )
    try:
        await demo.prepare()
        await demo.start()
        demo.write_description()
        yield demo
    finally:
        await demo.stop()


def _overlay(mesh: DemoMesh, site: str) -> dict[str, Any] | None:
    try:
        return json.loads((mesh.plan.sites[site].overlay_dir / "grid-config.json").read_text())
    except (OSError, ValueError):
        return None


def _find(overlay: dict[str, Any] | None, cluster: str) -> dict[str, Any] | None:
    if overlay is None:
        return None
    return next((c for c in overlay["candidates"] if c["cluster"] == cluster), None)


def _context(mesh: DemoMesh, site: str) -> ssl.SSLContext:
    assert mesh.pki is not None
    certs = mesh.pki.sites[site]
    return client_context(mesh.pki.ca, certs.cert, certs.key)


async def _signals(mesh: DemoMesh, site: str, scope: str) -> dict[str, Any]:
    """The site's signals document, fetched with its own certificate (Local)."""
    address = json.loads((mesh.root / "demo.json").read_text())["sites"][site]["signals"]
    connector = aiohttp.TCPConnector(ssl=_context(mesh, site))
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(f"https://{address}/v1/site/signals", params={"scope": scope}) as resp,
    ):
        assert resp.status == 200
        return dict(await resp.json())


async def _gauge(mesh: DemoMesh, provider: str, metric: str) -> float | None:
    port = next(p.port for p in mesh.plan.providers if p.name == provider)
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as resp,
    ):
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith(metric + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_every_site_pulls_every_peer_and_renders_without_scores(
    poll_mesh: DemoMesh,
) -> None:
    described = json.loads((poll_mesh.root / "demo.json").read_text())
    assert all(s["signals"] for s in described["sites"].values())

    def converged() -> bool:
        for site in SITES:
            overlay = _overlay(poll_mesh, site)
            if overlay is None or {c["site"] for c in overlay["candidates"]} != set(SITES):
                return False
        return True

    await eventually(converged, "every overlay lists all three sites", timeout_s=CONVERGE_TIMEOUT_S)
    for site in SITES:
        overlay = _overlay(poll_mesh, site)
        assert overlay is not None
        assert all("score" not in c and "score_breakdown" not in c for c in overlay["candidates"])
    grid = await _signals(poll_mesh, "east", "grid")
    assert {p["site"] for p in grid["providers"]} == set(SITES)
    own = await _signals(poll_mesh, "east", "site")
    assert {p["site"] for p in own["providers"]} == {"east"}


async def test_pulled_signals_match_what_the_provider_exposes(poll_mesh: DemoMesh) -> None:
    async def matches() -> bool:
        exposed = await _gauge(poll_mesh, "vllm-central", "vllm:kv_cache_usage_perc")
        grid = await _signals(poll_mesh, "east", "grid")
        pulled = next((p for p in grid["providers"] if p["name"] == "vllm-central"), None)
        if exposed is None or pulled is None:
            return False
        return abs(pulled["signals"].get("kv_cache_utilization", -1) - exposed) < 1e-9

    await eventually(
        matches, "east holds central's exposed KV-cache signal", timeout_s=CONVERGE_TIMEOUT_S
    )


async def _load(url: str, stop: asyncio.Event) -> None:
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            body = {"model": MODEL, "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
            async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=30)) as r:
                await r.read()


async def test_a_peer_past_the_excluded_threshold_leaves_remote_overlays_then_returns(
    poll_mesh: DemoMesh,
) -> None:
    await eventually(
        lambda: all(_find(_overlay(poll_mesh, s), "vllm-central") for s in ("east", "west")),
        "central is listed at east and west",
        timeout_s=CONVERGE_TIMEOUT_S,
    )
    port = next(p.port for p in poll_mesh.plan.providers if p.name == "vllm-central")
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    stop = asyncio.Event()
    workers = [asyncio.create_task(_load(url, stop)) for _ in range(LOAD_WORKERS)]
    try:
        shown = await eventually(
            lambda: _shown(poll_mesh, lambda w: w is not None and w >= 16),
            "central's /metrics shows the queue",
            interval_s=0.05,
        )
        gone = await eventually(
            lambda: _when(
                all(_find(_overlay(poll_mesh, s), "vllm-central") is None for s in ("east", "west"))
            ),
            "east and west drop the saturated central",
            interval_s=0.05,
        )
        assert gone - shown <= PROPAGATION_BOUND_S, f"excluded {gone - shown:.2f} s later"
    finally:
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
    idle = await eventually(
        lambda: _shown(poll_mesh, lambda w: w == 0),
        "central's queue drains",
        timeout_s=30.0,
        interval_s=0.05,
    )
    back = await eventually(
        lambda: _when(all(_find(_overlay(poll_mesh, s), "vllm-central") for s in ("east", "west"))),
        "east and west list central again",
        interval_s=0.05,
    )
    assert back - idle <= PROPAGATION_BOUND_S, f"restored {back - idle:.2f} s later"


def _when(condition: bool) -> float | None:
    return time.monotonic() if condition else None


async def _shown(mesh: DemoMesh, test: Any) -> float | None:
    waiting = await _gauge(mesh, "vllm-central", "vllm:num_requests_waiting")
    return time.monotonic() if test(waiting) else None


def _port_open(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, int(port))) == 0


async def test_supervisor_restarts_an_operator_into_the_declared_mode(tmp_path: Path) -> None:
    mesh = DemoMesh(tmp_path / "one", ["east"])
    try:
        await mesh.prepare()
        await mesh.start()
        signals = f"127.0.0.1:{mesh.plan.sites['east'].signals_port}"
        assert not _port_open(signals), "gossip leaves the signals listener unbound"
        await mesh.declare_signal_transport("poll")
        await eventually(
            lambda: mesh.children["operator-east"].restarts, "the operator restarts", timeout_s=20
        )
        await eventually(
            lambda: _port_open(signals), "the restarted operator serves poll", timeout_s=20
        )
        log = mesh.children["operator-east"].log_path.read_text()
        failed = [line for line in log.splitlines() if "operator failed" in line]
        assert len(failed) == 1 and "signalTransport.mode: poll" in failed[0]
        assert mesh.describe()["sites"]["east"]["signals"] == signals
    finally:
        await mesh.stop()
