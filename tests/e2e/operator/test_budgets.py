"""Tenant budgets across real processes: three operators, three gateways, mock providers.

Requests of one tenant go through several sites' gateways; every site's
``status.budgetStatus`` must show the same sum, equal to what the gateways
counted priced with the providers' costs (each site floors its own slot to
whole cents). Restarts of a gateway and of an operator neither lose nor
double-count spend, and a site cut off from the mesh (its operator stopped)
keeps a lower bound that catches up once it is back. The gateways authenticate
clients by API key (demo.json's ``api_keys``): a forged ``x-grid-tenant`` is
charged to the key's tenant, and a request without a key is refused.
"""

from __future__ import annotations

import re
import signal
from collections.abc import AsyncIterator
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from grid.adapters.store.sqlite import SqliteStore
from grid.demo.mesh import DemoMesh
from grid.demo.plan import DEMO_BUDGETS, MODEL, NETWORK
from grid.testing.poll import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

SITES = ["east", "west", "central"]
TENANT = "globex"
SETTLE_S = 30.0
SERIES = re.compile(
    r'^grid_gateway_tenant_tokens_total\{cluster="([^"]+)",direction="([^"]+)",tenant="([^"]+)"\}'
    r" ([0-9.e+]+)$",
    re.M,
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mesh(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DemoMesh]:
    demo = DemoMesh(tmp_path_factory.mktemp("budgets"), SITES)
    try:
        await demo.prepare()
        await demo.start()
        yield demo
    finally:
        await demo.stop()


async def _objects(path: Path, kind: str) -> list[dict[str, Any]]:
    store = await SqliteStore.open(path)
    try:
        return await store.list(kind)
    finally:
        await store.close()


async def _prices(mesh: DemoMesh) -> dict[str, tuple[Decimal, Decimal]]:
    prices = {}
    for site in mesh.plan.sites.values():
        for p in await _objects(site.store, "InferenceProvider"):
            cost = p["spec"].get("cost") or {}
            cluster = p["spec"].get("routingClusterRef") or p["metadata"]["name"]
            prices[cluster] = (
                Decimal(repr(float(cost.get("perMillionInputTokens", 0)))),
                Decimal(repr(float(cost.get("perMillionOutputTokens", 0)))),
            )
    return prices


def _key(mesh: DemoMesh, tenant: str, forged: str | None = None) -> dict[str, str]:
    """The headers of a client holding ``tenant``'s key (and claiming ``forged``)."""
    headers = {"Authorization": f"Bearer {mesh.api_keys[tenant]}"}
    return headers | ({"x-grid-tenant": forged} if forged is not None else {})


def _admin(mesh: DemoMesh, site: str) -> str:
    return f"http://127.0.0.1:{mesh.plan.sites[site].gateway_admin_port}/metrics"


async def _site_cents(http: aiohttp.ClientSession, mesh: DemoMesh, site: str) -> int:
    """What one site's slot must hold: its gateway's tokens priced exactly, floored."""
    prices = await _prices(mesh)
    async with http.get(_admin(mesh, site)) as resp:
        text = await resp.text()
    exact = Decimal(0)
    for cluster, direction, tenant, value in SERIES.findall(text):
        if tenant == TENANT:
            rate = prices[cluster][0 if direction == "input" else 1]
            exact += Decimal(int(float(value))) * rate * 100 / 1_000_000
    return int(exact.to_integral_value(rounding=ROUND_FLOOR))


async def _spend_cents(mesh: DemoMesh, site: str) -> int | None:
    return await _spend_cents_of(mesh, site, TENANT)


async def _spend_cents_of(mesh: DemoMesh, site: str, tenant: str) -> int | None:
    (network,) = [
        n
        for n in await _objects(mesh.plan.sites[site].store, "GridNetwork")
        if n["metadata"]["name"] == NETWORK
    ]
    items = (network.get("status") or {}).get("budgetStatus") or []
    item = next((i for i in items if i["tenantId"] == tenant), None)
    return None if item is None else round(Decimal(repr(item["spendUsd"])) * 100)


async def _send(http: aiohttp.ClientSession, mesh: DemoMesh, site: str, count: int) -> None:
    address = mesh.gateway_address(site)
    for n in range(count):
        body: dict[str, Any] = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "context " * 40_000}],
            "stream": n % 2 == 1,
        }
        async with http.post(
            f"http://{address}/v1/chat/completions", json=body, headers=_key(mesh, TENANT)
        ) as resp:
            assert resp.status == 200, await resp.text()
            await resp.read()


async def _agree(http: aiohttp.ClientSession, mesh: DemoMesh, sites: list[str]) -> int:
    """Wait until every site in ``sites`` reports the sum of every gateway's priced tokens."""

    last: dict[str, Any] = {}

    async def check() -> int | None:
        truth = sum([await _site_cents(http, mesh, s) for s in SITES])
        seen = {s: await _spend_cents(mesh, s) for s in sites}
        last.update(truth=truth, seen=seen)
        return truth if truth > 0 and all(v == truth for v in seen.values()) else None

    try:
        return await eventually(check, f"{sites} agree on {TENANT}'s spend", timeout_s=SETTLE_S)  # type: ignore[arg-type]
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last {last}") from None


async def test_spend_through_two_gateways_sums_on_every_site(mesh: DemoMesh) -> None:
    async with aiohttp.ClientSession() as http:
        await _send(http, mesh, "east", 4)
        await _send(http, mesh, "west", 4)
        total = await _agree(http, mesh, SITES)
        assert total == await _site_cents(http, mesh, "east") + await _site_cents(
            http, mesh, "west"
        )
        # The same scrape feeds each site's live view with what its gateway sent.
        for site in ("east", "west"):
            metrics = mesh.describe()["sites"][site]["metrics"]
            async with http.get(f"http://{metrics}/ui/state.json") as resp:
                traffic = (await resp.json())["traffic"][site]
            assert sum(traffic.values()) >= 4, traffic


async def test_gateway_and_operator_restarts_neither_lose_nor_double_count(
    mesh: DemoMesh,
) -> None:
    async with aiohttp.ClientSession() as http:
        before = await _agree(http, mesh, SITES)
        # Stopped right after the requests, before its operator can scrape them.
        await _send(http, mesh, "east", 2)
        counted = await _site_cents(http, mesh, "east")
        child = mesh.children["gateway-east"]
        assert child.process is not None
        child.supervised = False
        child.process.send_signal(signal.SIGTERM)
        await mesh.wait_exit("gateway-east")
        await mesh.start_gateway("east")
        await eventually(lambda: _gateway_up(http, mesh), "east gateway back")  # type: ignore[arg-type]
        assert await _site_cents(http, mesh, "east") == counted  # the counters came back
        after_gateway = await _agree(http, mesh, SITES)  # equal to the truth: none twice
        assert after_gateway > before
        # The operator dies right after its gateway counted more.
        await _send(http, mesh, "east", 2)
        mesh.kill_operator("east", signal.SIGKILL)
        await mesh.wait_exit("operator-east")
        await mesh.start_operator("east")
        assert await _agree(http, mesh, SITES) > after_gateway


async def _gateway_up(http: aiohttp.ClientSession, mesh: DemoMesh) -> bool:
    try:
        async with http.get(_admin(mesh, "east")) as resp:
            return resp.status == 200
    except aiohttp.ClientError:
        return False


async def test_a_cut_off_site_keeps_a_lower_bound_and_catches_up(mesh: DemoMesh) -> None:
    async with aiohttp.ClientSession() as http:
        start = await _agree(http, mesh, SITES)
        mesh.kill_operator("central", signal.SIGSTOP)
        try:
            await _send(http, mesh, "east", 2)
            await _send(http, mesh, "central", 2)  # counted by central's gateway only
            frozen = await _spend_cents(mesh, "central")
            assert frozen is not None and frozen <= start
            for site in ("east", "west"):
                seen = await _spend_cents(mesh, site)
                truth = sum([await _site_cents(http, mesh, s) for s in SITES])
                assert seen is not None and seen <= truth
        finally:
            mesh.kill_operator("central", signal.SIGCONT)
            mesh.children["operator-central"].supervised = True
        assert await _agree(http, mesh, SITES) > start


async def _status_of(
    http: aiohttp.ClientSession, mesh: DemoMesh, site: str, headers: dict[str, str]
) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "context " * 40_000}]}
    address = mesh.gateway_address(site)
    async with http.post(
        f"http://{address}/v1/chat/completions", json=body, headers=headers
    ) as resp:
        await resp.read()
        return resp.status


async def test_a_tenant_spent_across_sites_gets_429_at_every_gateway(mesh: DemoMesh) -> None:
    cap_cents = round(DEMO_BUDGETS["acme"] * 100)
    async with aiohttp.ClientSession() as http:
        # acme spends only through east and west; central's gateway never serves it.
        for n in range(4 * cap_cents):
            if await _status_of(http, mesh, ("east", "west")[n % 2], _key(mesh, "acme")) == 429:
                break

        async def everywhere() -> bool:
            return all([await _status_of(http, mesh, s, _key(mesh, "acme")) == 429 for s in SITES])

        await eventually(everywhere, "acme refused at every gateway", timeout_s=SETTLE_S)  # type: ignore[arg-type]
        for site in SITES:
            assert await _status_of(http, mesh, site, _key(mesh, TENANT)) == 200
            # acme's key claiming globex is still acme; globex's claiming acme is globex.
            assert await _status_of(http, mesh, site, _key(mesh, "acme", TENANT)) == 429
            assert await _status_of(http, mesh, site, _key(mesh, TENANT, "acme")) == 200
            # No key, or a made-up one, is never served free.
            assert await _status_of(http, mesh, site, {"x-grid-tenant": TENANT}) == 401
            assert await _status_of(http, mesh, site, {"x-api-key": "grid-made-up"}) == 401
    for site in SITES:
        spent = await _spend_cents_of(mesh, site, "acme")
        assert spent is not None and spent >= cap_cents
