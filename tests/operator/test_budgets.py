"""The operator's budget pieces: reading gateway counters, pricing from records, the ledger."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from grid.adapters.http_listener import HttpListener
from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.crdt.replica import GridState
from grid.core.metering.budgets import Ledger
from grid.core.resources.network_status import conditions_of
from grid.core.retry import classify
from grid.errors import GridError
from grid.gateway.settings import LISTENER_POLICY
from grid.operator.budgets import BudgetMeter, cluster_prices
from grid.operator.gateway_scrape import GatewayScrape, read_exposition
from grid.operator.ledger_store import LEDGER_FILE, LedgerStore, ledger_configmap_name
from grid.operator.resilience import WriteGuard
from grid.operator.round_gate import LEDGER_APPLY_FAILED, round_outcome
from grid.testing.faulty_store import FAULTS, FaultyStore, WriteFault, fault_error
from grid.testing.store import InMemoryStore

from .conftest import OPERATOR_NAMESPACE as NS
from .conftest import CountingStore

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
    assert read_exposition(EXPOSITION).tokens == {
        ("acme", "c", "input"): 1_000_000,
        ("acme", "c", "output"): 500_000,
    }


def test_clusters_are_priced_from_the_provider_records() -> None:
    (price,) = cluster_prices(_replica()).values()
    assert price.cents("input", 1_000_000) == 20
    assert price.cents("output", 1_000_000) == 60


def test_a_record_without_signals_is_priced_from_its_own_prices() -> None:
    # Under poll the published records carry no signals; the spec's prices remain.
    replica = GridState("east")
    record = ProviderRecord(
        name="p",
        cluster="c",
        site="east",
        backend_kind="local",
        cost_per_million_input_tokens=0.2,
        cost_per_million_output_tokens=0.6,
    )
    replica.update_local(replica.local.put_provider("p", record))
    (price,) = cluster_prices(replica).values()
    assert price.cents("input", 1_000_000) == 20
    assert price.cents("output", 1_000_000) == 60


async def _serve(text: str, port: int = 0) -> tuple[HttpListener, str]:
    app = web.Application()

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=text)

    app.router.add_get("/metrics", metrics)
    listener = HttpListener(app, LISTENER_POLICY)
    host, port = await listener.start("127.0.0.1", port)
    return listener, f"http://{host}:{port}/metrics"


async def _scrape(meter: BudgetMeter, urls: list[str], replica: GridState) -> GatewayScrape:
    scrape = GatewayScrape(urls, 1.0)
    async with aiohttp.ClientSession() as http:
        assert await meter.observe(await scrape.scrape(http), replica)
        assert not await meter.observe(await scrape.scrape(http), replica)  # nothing new
    return scrape


async def test_a_scrape_raises_the_slot_and_a_restart_reads_it_back(
    store: CountingStore, tmp_path: Path
) -> None:
    runner, url = await _serve(EXPOSITION)
    replica = _replica()
    try:
        meter = BudgetMeter("east", LedgerStore(store, "east", NS, tmp_path))
        await meter.load()
        scrape = await _scrape(meter, [url, "http://127.0.0.1:1/metrics"], replica)
        assert scrape.failures == 2  # the dead URL, twice
        assert scrape.traffic() == {}
    finally:
        await runner.stop()
    assert meter.ledger.cents == {"acme": 50}  # 20 cents in, 30 cents out
    replica.update_local(meter.publish(replica.local))
    assert replica.spend("acme").value == 50
    assert (tmp_path / LEDGER_FILE).exists()
    again = BudgetMeter("east", LedgerStore(store, "east", NS, tmp_path))
    await again.load()
    assert again.ledger == meter.ledger
    assert again.publish(replica.local) == replica.local  # never lowered, nothing to add


async def test_without_a_state_directory_the_configmap_carries_the_ledger(
    store: CountingStore,
) -> None:
    """The Kubernetes case: no disk, and the restarted operator (or a new leader) reads it back."""
    runner, url = await _serve(EXPOSITION)
    try:
        meter = BudgetMeter("east", LedgerStore(store, "east", NS, None))
        await meter.load()
        await _scrape(meter, [url], _replica())
    finally:
        await runner.stop()
    cm = await store.get("ConfigMap", ledger_configmap_name("east"), namespace=NS)
    assert json.loads(cm["data"][LEDGER_FILE])["cents"] == {"acme": 50}
    again = BudgetMeter("east", LedgerStore(store, "east", NS, None))
    await again.load()
    assert again.ledger == meter.ledger
    # The same gateway's same counters after the restart are not priced again.
    runner, _ = await _serve(EXPOSITION, int(url.rsplit(":", 1)[1].split("/")[0]))
    try:
        async with aiohttp.ClientSession() as http:
            scraped = await GatewayScrape([url], 1.0).scrape(http)
        assert not await again.observe(scraped, _replica())
    finally:
        await runner.stop()
    assert again.ledger.cents == {"acme": 50}


async def test_the_copy_saved_last_wins(store: CountingStore, tmp_path: Path) -> None:
    ledgers = LedgerStore(store, "east", NS, tmp_path)
    await ledgers.save(Ledger(cents={"acme": 5}))
    older = (tmp_path / LEDGER_FILE).read_text()
    await ledgers.save(Ledger(cents={"acme": 7}))
    (tmp_path / LEDGER_FILE).write_text(older)  # a crash left the file a save behind
    assert (await LedgerStore(store, "east", NS, tmp_path).load()).cents == {"acme": 7}
    (tmp_path / LEDGER_FILE).write_text("{not json")
    assert (await LedgerStore(store, "east", NS, tmp_path).load()).cents == {"acme": 7}


class _FailingLedgers(LedgerStore):
    async def save(self, ledger: Ledger) -> None:
        raise GridError("the API server is away", code="unavailable")


async def test_a_ledger_that_cannot_be_saved_is_neither_kept_nor_published(
    tmp_path: Path,
) -> None:
    runner, url = await _serve(EXPOSITION)
    replica = _replica()
    try:
        meter = BudgetMeter("east", _FailingLedgers(InMemoryStore(), "east", NS, tmp_path))
        async with aiohttp.ClientSession() as http:
            scraped = await GatewayScrape([url], 1.0).scrape(http)
        assert not await meter.observe(scraped, replica)
    finally:
        await runner.stop()
    assert meter.ledger == Ledger() and meter.save_failures == 1
    assert meter.publish(replica.local) == replica.local


async def test_upstream_requests_are_summed_per_cluster_over_the_gateways() -> None:
    text = """\
# TYPE grid_gateway_upstream_requests_total counter
grid_gateway_upstream_requests_total{cluster="c"} 3.0
grid_gateway_upstream_requests_total{cluster="d"} 1.0
"""
    served = [await _serve(body) for body in (text, text, "{{{")]
    scrape = GatewayScrape([url for _, url in served], 1.0)
    try:
        async with aiohttp.ClientSession() as http:
            await scrape.scrape(http)
    finally:
        for runner, _ in served:
            await runner.stop()
    assert scrape.traffic() == {"c": 6, "d": 2}
    assert scrape.failures == 1  # the body that is no exposition counts nothing


def test_long_site_names_give_a_valid_configmap_name() -> None:
    name = ledger_configmap_name("s" * 60)
    assert len(name) == 63 and name != ledger_configmap_name("s" * 61)


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_ledger_write_fault_is_counted_reported_and_cleared(
    store: CountingStore, fault: str
) -> None:
    """Each failure of the ledger ConfigMap write, on each store: counted by reason, named
    ``LedgerApplyFailed`` in the round's outcome, and saved once the fault clears."""
    faulty = FaultyStore(store)
    injected = WriteFault(fault, lambda verb, kind, name, _b: kind == "ConfigMap")
    faulty.write_faults.append(injected)
    registry = CollectorRegistry()
    guard = WriteGuard(registry, sleep=_no_wait)
    meter = BudgetMeter("east", LedgerStore(faulty, "east", NS, None, guard))
    runner, url = await _serve(EXPOSITION)
    try:
        async with aiohttp.ClientSession() as http:
            scraped = await GatewayScrape([url], 1.0).scrape(http)
        assert not await meter.observe(scraped, _replica())
        assert meter.save_failing and injected.hits >= 1
        reason = classify(fault_error(fault)).reason.value
        labels = {"site": "ledger", "reason": reason}
        assert registry.get_sample_value("grid_operator_write_failures_total", labels) == 1
        outcome = round_outcome(_NoOverlays(), (), meter.save_failing)
        assert conditions_of(outcome, {})["OverlaysDistributed"][1] == LEDGER_APPLY_FAILED
        injected.active = False
        assert await meter.observe(scraped, _replica())
    finally:
        await runner.stop()
    assert not meter.save_failing and meter.ledger.cents == {"acme": 50}
    cm = await store.get("ConfigMap", ledger_configmap_name("east"), namespace=NS)
    assert json.loads(cm["data"][LEDGER_FILE])["cents"] == {"acme": 50}


async def _no_wait(_seconds: float) -> None:
    return None


class _NoOverlays:
    served = 1
    render_failed: list[str] = []
    write_failed: list[str] = []
    apply_failed: list[tuple[str, str]] = []
