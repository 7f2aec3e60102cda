"""The operator's budget pieces: reading gateway counters, pricing from records, the ledger file."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from aiohttp import web

from grid.adapters.http_listener import HttpListener
from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.crdt.replica import GridState
from grid.gateway.settings import LISTENER_POLICY
from grid.operator.budgets import LEDGER_FILE, BudgetMeter, cluster_prices, parse_tenant_tokens

EXPOSITION = """\
# HELP grid_gateway_tenant_tokens_total Tokens.
# TYPE grid_gateway_tenant_tokens_total counter
grid_gateway_tenant_tokens_total{cluster="c",direction="input",tenant="acme"} 1000000.0
grid_gateway_tenant_tokens_total{cluster="c",direction="output",tenant="acme"} 500000.0
grid_gateway_tenant_tokens_total{cluster="c",direction="sideways",tenant="acme"} 9.0
grid_gateway_requests_total{outcome="routed"} 3.0
"""


def _replica(site: str = "east") -> GridState:
    replica = GridState(site)
    record = ProviderRecord(
        name="p",
        cluster="c",
        site=site,
        backend_kind="local",
        signals=RecordSignals(cost_per_million_input_tokens=0.2),
        cost_per_million_output_tokens=0.6,
    )
    replica.update_local(replica.local.put_provider("p", record))
    return replica


def test_only_the_tenant_token_counters_are_read() -> None:
    assert parse_tenant_tokens(EXPOSITION) == {
        ("acme", "c", "input"): 1_000_000,
        ("acme", "c", "output"): 500_000,
    }


def test_clusters_are_priced_from_the_provider_records() -> None:
    (price,) = cluster_prices(_replica()).values()
    assert price.cents("input", 1_000_000) == 20
    assert price.cents("output", 1_000_000) == 60


async def _serve(text: str) -> tuple[HttpListener, str]:
    app = web.Application()

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=text)

    app.router.add_get("/metrics", metrics)
    listener = HttpListener(app, LISTENER_POLICY)
    host, port = await listener.start("127.0.0.1", 0)
    return listener, f"http://{host}:{port}/metrics"


async def test_a_scrape_raises_the_slot_and_a_restart_reads_it_back(tmp_path: Path) -> None:
    runner, url = await _serve(EXPOSITION)
    replica = _replica()
    try:
        meter = BudgetMeter("east", [url, "http://127.0.0.1:1/metrics"], tmp_path, 1.0)
        async with aiohttp.ClientSession() as http:
            assert await meter.scrape(http, replica)
            assert not await meter.scrape(http, replica)  # the same counters: nothing new
        assert meter.scrape_failures == 2  # the dead URL, twice
    finally:
        await runner.stop()
    assert meter.ledger.cents == {"acme": 50}  # 20 cents in, 30 cents out
    replica.update_local(meter.publish(replica.local))
    assert replica.spend("acme").value == 50
    assert (tmp_path / LEDGER_FILE).exists()
    again = BudgetMeter("east", [url], tmp_path, 1.0)
    assert again.ledger == meter.ledger
    assert again.publish(replica.local) == replica.local  # never lowered, nothing to add
