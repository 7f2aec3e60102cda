"""Selection (§14) through a real ``grid gateway``: leastLoaded spreads, deterministic
herds, and a failing provider is ejected."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grid.testing.gateway import (
    MODEL,
    GatewayProcess,
    Upstream,
    candidate,
    envelope,
    overlay,
    render_praxis,
    write_json,
)
from grid.testing.poll import eventually

pytestmark = pytest.mark.e2e

Upstreams = Callable[..., Awaitable[Upstream]]
Gateways = Callable[..., Awaitable[GatewayProcess]]
CHAT = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}


async def _start(gateways: Gateways, tmp: Path, ups: list[Upstream], **top: Any) -> GatewayProcess:
    document = {**overlay(*(candidate(u.name, selection_group=0) for u in ups)), **top}
    path = tmp / "grid-overlay.json"
    write_json(path, envelope(document))
    rendered, public, admin = render_praxis(document, ups, tmp, overlay_file=path)
    config = tmp / "praxis.yaml"
    config.write_text(rendered.text)
    return await gateways(config, public, admin)


async def _burst(http: aiohttp.ClientSession, gateway: GatewayProcess, count: int) -> None:
    async def one() -> None:
        async with http.post(gateway.url(), json=CHAT) as resp:
            assert resp.status == 200
            await resp.read()

    await asyncio.gather(*(one() for _ in range(count)))


def _series(text: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of one metric in a Prometheus exposition."""
    found = {}
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(\{{[^}}]*\}})? (\S+)", line)
        if match:
            found[match.group(1) or ""] = float(match.group(2))
    return found


@pytest.mark.parametrize(
    ("policy", "spreads"),
    [
        ({"selection_policy": "random", "selection_load_aware": True}, True),
        ({"selection_policy": "deterministic"}, False),
        ({}, False),
    ],
)
async def test_least_loaded_spreads_and_deterministic_herds(
    tmp_path: Path,
    upstreams: Upstreams,
    gateways: Gateways,
    http: aiohttp.ClientSession,
    policy: dict[str, Any],
    spreads: bool,
) -> None:
    ups = [await upstreams(n, mode="stream", chunks=4, pause_s=0.05) for n in ("a", "b")]
    gateway = await _start(gateways, tmp_path, ups, **policy)
    await _burst(http, gateway, 16)
    a, b = (len(u.seen) for u in ups)
    assert a + b == 16
    if spreads:
        assert a > 0 and b > 0
    else:
        assert (a, b) == (16, 0)
    text = await gateway.metrics(http)
    selections = _series(text, "grid_gateway_selections_total")
    assert sum(selections.values()) == 16
    assert selections['{cluster="a",group="0"}'] == a
    # Every answer ended, streams included: nothing is left in flight.
    assert set(_series(text, "grid_gateway_upstream_in_flight").values()) == {0.0}


async def test_a_failing_provider_is_ejected_after_three_failures(
    tmp_path: Path, upstreams: Upstreams, gateways: Gateways, http: aiohttp.ClientSession
) -> None:
    bad = await upstreams("bad", mode="unavailable")
    good = await upstreams("good")
    gateway = await _start(gateways, tmp_path, [bad, good], selection_policy="deterministic")
    for _ in range(10):
        async with http.post(gateway.url(), json={"model": MODEL}) as resp:
            assert resp.status == 200
            assert (await resp.json())["served_by"] == "good"
    # Three 503s eject it; the seven requests after that go straight to the good one.
    assert len(bad.seen) == 3 and len(good.seen) == 10
    text = await gateway.metrics(http)
    assert _series(text, "grid_gateway_ejections_total")['{cluster="bad"}'] == 1.0
    assert _series(text, "grid_gateway_failovers_total")[""] == 3.0
    # With the good one gone too, the ejected one is still tried as a last resort.
    await good.stop()

    async def last_resort() -> bool:
        async with http.post(gateway.url(), json={"model": MODEL}) as resp:
            return resp.status == 503

    await eventually(last_resort, "the ejected candidate tried as the last resort")
    assert len(bad.seen) >= 4
