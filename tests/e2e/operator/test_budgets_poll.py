"""Tenant spend is priced alike under both signal transports.

Under ``signalTransport: poll`` the provider records carry no signals, so the
input price must travel in the record itself (``cost_per_million_input_tokens``,
from the spec). The same traffic, sent through the same gateway to the one
cluster that serves the model, must cost the same under gossip and under poll,
on every site, and equal the gateway's tokens priced with the spec.
"""

from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grid.demo.mesh import DemoMesh
from grid.demo.plan import API_MODEL
from grid.testing.poll import eventually

from .test_budgets import SERIES, _admin, _prices, _spend_cents_of

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]

SITES = ["east", "west"]
TENANT = "globex"
REQUESTS = 4
SETTLE_S = 30.0


async def _exact_cents(http: aiohttp.ClientSession, mesh: DemoMesh) -> tuple[int, int]:
    """(cents the gateways' tokens cost at the spec's prices, input tokens counted)."""
    prices = await _prices(mesh)
    exact, inputs = Decimal(0), 0
    for site in SITES:
        async with http.get(_admin(mesh, site)) as resp:
            text = await resp.text()
        for cluster, direction, tenant, value in SERIES.findall(text):
            if tenant != TENANT:
                continue
            tokens = int(float(value))
            inputs += tokens if direction == "input" else 0
            exact += Decimal(tokens) * prices[cluster][direction != "input"] * 100 / 1_000_000
    return int(exact.to_integral_value(rounding=ROUND_FLOOR)), inputs


async def _send(http: aiohttp.ClientSession, mesh: DemoMesh, headers: dict[str, str]) -> None:
    address = mesh.gateway_address("east")
    for n in range(REQUESTS):
        body: dict[str, Any] = {
            "model": API_MODEL,
            "messages": [{"role": "user", "content": "context " * 40_000}],
            "stream": n % 2 == 1,
        }
        async with http.post(
            f"http://{address}/v1/chat/completions", json=body, headers=headers
        ) as resp:
            assert resp.status == 200, await resp.text()
            await resp.read()


async def _spend_under(root: Path, transport: str) -> tuple[int, int]:
    """Run the traffic on a fresh two-site mesh; (agreed spend in cents, input tokens)."""
    mesh = DemoMesh(root, SITES, signal_transport=transport)
    try:
        await mesh.prepare()
        await mesh.start()
        async with aiohttp.ClientSession() as http:
            await _send(http, mesh, {"Authorization": f"Bearer {mesh.api_keys[TENANT]}"})
            exact, inputs = await _exact_cents(http, mesh)
            assert exact > 0 and inputs > 0

            async def agreed() -> int | None:
                seen = {s: await _spend_cents_of(mesh, s, TENANT) for s in SITES}
                return exact if all(v == exact for v in seen.values()) else None

            await eventually(
                agreed, f"{transport}: every site prices {exact} cents", timeout_s=SETTLE_S
            )  # type: ignore[arg-type]
            return exact, inputs
    finally:
        await mesh.stop()


async def test_poll_prices_the_same_traffic_as_gossip(tmp_path: Path) -> None:
    gossip = await _spend_under(tmp_path / "gossip", "gossip")
    poll = await _spend_under(tmp_path / "poll", "poll")
    # The same tokens, and the same cents for them: the input price is not lost.
    assert poll == gossip
