"""Gateways a GridNetwork declares with ``adminUrl`` are metered with no operator flag.

On Kubernetes the operator reaches its gateways at Service addresses it cannot
guess; ``gatewayRefs[].adminUrl`` names them, so an install meters without
``--gateway-metrics`` (and the chart renders it from its values).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from grid.adapters.http_listener import HttpListener
from grid.core.crdt.record import ProviderRecord
from grid.core.resources import API_VERSION, GridNetwork
from grid.gateway.settings import LISTENER_POLICY
from grid.operator.budgets import BudgetLoop, BudgetMeter
from grid.operator.gateway_scrape import GatewayScrape
from grid.operator.ledger_store import LedgerStore
from grid.operator.runtime import Operator
from grid.operator.settings import OperatorSettings
from grid.testing.store import InMemoryStore

EXPOSITION = """\
# TYPE grid_gateway_tenant_tokens_total counter
grid_gateway_tenant_tokens_total{cluster="c",direction="input",tenant="acme"} 1000000.0
grid_gateway_tenant_tokens_total{cluster="c",direction="output",tenant="acme"} 500000.0
"""


def _network(refs: list[dict[str, Any]]) -> GridNetwork:
    return GridNetwork.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "GridNetwork",
            "metadata": {"name": "net"},
            "spec": {"gatewayRefs": refs},
        }
    )


def test_only_this_sites_gateways_with_an_admin_url_are_read() -> None:
    network = _network(
        [
            {"name": "a", "localSiteName": "east", "adminUrl": "http://a.gw.svc:9901/"},
            {"name": "b", "adminUrl": "https://b.gw.svc:9901/admin"},  # the reader's own site
            {"name": "c", "localSiteName": "west", "adminUrl": "http://c.gw.svc:9901"},
            {"name": "d", "localSiteName": "east"},  # no adminUrl: the flag's to name
        ]
    )
    assert network.spec.gateway_metrics_urls("east") == [
        "http://a.gw.svc:9901/metrics",
        "https://b.gw.svc:9901/admin/metrics",
    ]
    assert network.spec.gateway_metrics_urls("west") == [
        "https://b.gw.svc:9901/admin/metrics",
        "http://c.gw.svc:9901/metrics",
    ]


@pytest.mark.parametrize(
    "url", ["gw:9901", "http://gw:9901/?x=1", "http://gw:9901#top", "ftp://gw"]
)
def test_an_admin_url_is_an_http_base_url(url: str) -> None:
    with pytest.raises(ValueError, match="adminUrl"):
        _network([{"name": "a", "adminUrl": url}])


async def _serve() -> tuple[HttpListener, str]:
    app = web.Application()

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=EXPOSITION)

    app.router.add_get("/metrics", metrics)
    listener = HttpListener(app, LISTENER_POLICY)
    host, port = await listener.start("127.0.0.1", 0)
    return listener, f"http://{host}:{port}"


async def test_the_operator_meters_a_declared_gateway_without_the_flag(tmp_path: Path) -> None:
    listener, base = await _serve()
    try:
        settings = OperatorSettings(site="east", store="memory:", overlay_dir=tmp_path)
        store = InMemoryStore()
        operator = Operator(settings, store)  # type: ignore[arg-type]
        assert operator.gateways.targets() == []  # no network served yet, no flag
        refs = [
            {"name": "edge", "namespace": "gw", "localSiteName": "east", "adminUrl": base},
            {"name": "far", "localSiteName": "west", "adminUrl": "http://127.0.0.1:1"},
        ]
        operator.served.network = _network(refs)
        assert operator.gateways.targets() == [f"{base}/metrics"]
        record = ProviderRecord(
            name="p", cluster="c", site="east", backend_kind="local",
            cost_per_million_input_tokens=0.2, cost_per_million_output_tokens=0.6,
        )  # fmt: skip
        replica = operator.replica
        replica.update_local(replica.local.put_provider("p", record))
        meter = operator.budget_meter
        await meter.load()
        async with aiohttp.ClientSession() as http:
            assert await meter.observe(await operator.gateways.scrape(http), replica)
        assert meter.ledger.cents == {"acme": 50}  # 20 cents in, 30 cents out
        assert operator.gateways.failures == 0  # west's gateway is not this site's to read
    finally:
        await listener.stop()


async def test_a_flag_url_also_declared_is_read_once() -> None:
    scrape = GatewayScrape(["http://gw:9901/metrics"], 1.0, lambda: ["http://gw:9901/metrics"])
    assert scrape.targets() == ["http://gw:9901/metrics"]


async def test_a_budget_round_without_any_gateway_does_nothing(tmp_path: Path) -> None:
    async def write(_change: Any) -> bool:
        raise AssertionError("nothing to publish without a gateway")

    store = InMemoryStore()
    meter = BudgetMeter("east", LedgerStore(store, "east", "grid", tmp_path))  # type: ignore[arg-type]
    operator_replica = Operator(
        OperatorSettings(site="east", store="memory:", overlay_dir=tmp_path),
        store,  # type: ignore[arg-type]
    ).replica
    loop = BudgetLoop(
        GatewayScrape([], 1.0),
        meter,
        operator_replica,
        write,
        interval_s=1.0,
        traffic_changed=lambda: None,
        spend_changed=lambda: None,
    )
    async with aiohttp.ClientSession() as http:
        await loop.round(http)
    assert not (tmp_path / "budget-ledger.json").exists()
