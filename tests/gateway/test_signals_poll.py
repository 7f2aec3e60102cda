"""Poll mode: the gateway polls its operator's signals over real mTLS and ranks by them."""

from __future__ import annotations

import random
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.demo.pki import DevCA
from grid.gateway.config import load_config
from grid.gateway.server import Gateway
from grid.gateway.settings import GatewaySettings
from grid.gateway.signals_poll import OperatorSignals, SiteCredentials, backoff_s
from grid.testing.gateway import SCOPE, Upstream, candidate, overlay, render_praxis
from grid.testing.poll import eventually
from grid.testing.signals_operator import SignalsOperator


@dataclass(frozen=True)
class Pki:
    site: SiteCredentials
    foreign_ca: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = DevCA()
    issued = ca.issue_site("east")
    (directory / "ca.pem").write_bytes(ca.cert_pem)
    (directory / "east.pem").write_bytes(issued.cert_pem)
    (directory / "east-key.pem").write_bytes(issued.key_pem)
    (directory / "foreign.pem").write_bytes(DevCA("other CA").cert_pem)
    return Pki(
        SiteCredentials(directory / "east.pem", directory / "east-key.pem", directory / "ca.pem"),
        directory / "foreign.pem",
    )


def _server_tls(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.site.ca))
    context.load_cert_chain(str(pki.site.cert), str(pki.site.key))
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _document(sequence: int, **queues: float) -> dict[str, Any]:
    return {
        "schema_version": "1.0.0",
        "network": SCOPE.network,
        "site": "east",
        "epoch": 7,
        "sequence": sequence,
        "generated_at": "2026-01-01T00:01:00Z",
        "providers": [
            {
                "name": f"p-{cluster}",
                "cluster": cluster,
                "site": "east",
                "backend_kind": "local",
                "models": ["llama"],
                "observed_at": "2026-01-01T00:00:59Z",
                "signals": {"queue_depth": queue},
            }
            for cluster, queue in queues.items()
        ],
    }


@pytest.fixture
async def operator(pki: Pki) -> AsyncIterator[tuple[SignalsOperator, str]]:
    server = SignalsOperator(_server_tls(pki), _document(1, a=0.1))
    address = await server.start()
    yield server, address
    await server.stop()


FAST = GatewaySettings(signals_poll_interval_s=0.05, signals_backoff_max_s=0.4)


async def test_polls_carry_the_site_certificate_and_the_etag_over_one_connection(
    pki: Pki, operator: tuple[SignalsOperator, str]
) -> None:
    server, address = operator
    poller = OperatorSignals(address, pki.site, FAST)
    try:
        assert await poller.poll_once() == "ok"
        assert poller.document is not None and poller.document.sequence == 1
        assert await poller.poll_once() == "not_modified"
        assert await poller.poll_once() == "not_modified"
        server.document = _document(2, a=0.5)
        assert await poller.poll_once() == "ok"
        assert poller.document.sequence == 2
    finally:
        await poller.close()
    assert server.if_none_match[0] is None
    assert server.if_none_match[1] == server.if_none_match[2] != None  # noqa: E711
    assert server.scopes == ["grid"] * 4
    assert all(server.client_certs) and len(server.connections) == 1
    assert {k: v.value for k, v in poller.outcomes.items()} == {
        "ok": 2,
        "not_modified": 2,
        "error": 0,
    }


async def test_a_failing_operator_keeps_the_last_good_document_and_backs_off(
    pki: Pki, operator: tuple[SignalsOperator, str]
) -> None:
    server, address = operator
    poller = OperatorSignals(address, pki.site, FAST, rng=random.Random(1))
    try:
        assert await poller.poll_once() == "ok"
        good = poller.document
        delays = [poller.next_delay_s()]
        for status in (503, 500, 404):
            server.fail_status = status
            assert await poller.poll_once() == "error"
            assert poller.document is good
            delays.append(poller.next_delay_s())
        server.fail_status = None
        server.document = {"schema_version": "1.0.0"}  # invalid: kept out
        assert await poller.poll_once() == "error"
        assert poller.document is good and poller.failures == 4
        server.document = _document(3, a=0.2)
        assert await poller.poll_once() == "ok"
        assert poller.failures == 0 and poller.next_delay_s() == FAST.signals_poll_interval_s
    finally:
        await poller.close()
    assert delays[0] == FAST.signals_poll_interval_s
    assert all(d > FAST.signals_poll_interval_s for d in delays[1:])
    assert max(delays) <= FAST.signals_backoff_max_s


async def test_an_operator_not_signed_by_the_grid_ca_is_refused(
    pki: Pki, operator: tuple[SignalsOperator, str]
) -> None:
    server, address = operator
    wrong = SiteCredentials(pki.site.cert, pki.site.key, pki.foreign_ca)
    poller = OperatorSignals(address, wrong, FAST)
    try:
        assert await poller.poll_once() == "error"
    finally:
        await poller.close()
    assert poller.document is None and server.requests == 0


@given(st.integers(0, 200), st.floats(0.01, 10), st.floats(0.01, 100), st.integers(0, 99))
def test_backoff_is_the_interval_when_healthy_then_grows_capped_and_jittered(
    failures: int, interval: float, cap: float, seed: int
) -> None:
    delay = backoff_s(failures, interval, cap, random.Random(seed))
    if failures == 0:
        assert delay == interval
    else:
        base = min(cap, interval * 2.0 ** min(failures, 32))
        assert base / 2 <= delay <= base


async def test_the_gateway_routes_by_pulled_signals_within_a_group(
    pki: Pki, operator: tuple[SignalsOperator, str], tmp_path: Path
) -> None:
    server, address = operator
    busy, idle = await Upstream("busy").start(), await Upstream("idle").start()
    document = overlay(candidate("busy"), candidate("idle"))
    rendered, _public, _admin = render_praxis(document, [busy, idle], tmp_path)
    path = tmp_path / "praxis.yaml"
    path.write_text(rendered.text)
    config = load_config(path, 1 << 20)
    gateway = Gateway(config, FAST, path, address, pki.site)
    server.document = _document(1, busy=0.9, idle=0.0)
    # Before any document arrives the overlay order stands.
    assert [c.cluster for c in gateway.snapshot().candidates] == ["busy", "idle"]
    public, admin = await gateway.start()
    try:
        await eventually(
            lambda: [c.cluster for c in gateway.snapshot().candidates] == ["idle", "busy"],
            "re-ranked by pulled signals",
        )
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"http://{public}/v1/chat/completions",
                json={"model": "llama", "messages": []},
            ) as resp:
                assert resp.status == 200
                assert (await resp.json())["served_by"] == "idle"
            async with http.get(f"http://{admin}/snapshot") as resp:
                view = await resp.json()
            async with http.get(f"http://{admin}/metrics") as resp:
                metrics = await resp.text()
        assert view["signals"]["sequence"] == 1 and view["signals"]["operator"] == address
        assert [c["cluster"] for c in view["candidates"]] == ["idle", "busy"]
        assert 'grid_gateway_signals_polls_total{outcome="ok"} 1.0' in metrics
        # The load turns: the order follows, without an overlay change.
        server.document = _document(2, busy=0.0, idle=0.9)
        await eventually(
            lambda: [c.cluster for c in gateway.snapshot().candidates] == ["busy", "idle"],
            "re-ranked after the signals changed",
        )
    finally:
        await gateway.stop()
        await busy.stop()
        await idle.stop()


async def test_an_oversized_or_invalid_document_is_a_refused_ingest(
    pki: Pki, operator: tuple[SignalsOperator, str]
) -> None:
    server, address = operator
    ingests: list[bool] = []
    small = GatewaySettings(signals_body_max_bytes=64)
    poller = OperatorSignals(address, pki.site, small, on_ingest=ingests.append)
    try:
        assert await poller.poll_once() == "error"  # the document is over 64 bytes
        assert poller.document is None and ingests == [False]
        server.fail_status = 503
        assert await poller.poll_once() == "error"  # nothing arrived: no ingest
        assert ingests == [False]
    finally:
        await poller.close()
    roomy = OperatorSignals(address, pki.site, FAST, on_ingest=ingests.append)
    server.fail_status = None
    try:
        assert await roomy.poll_once() == "ok"
        assert await roomy.poll_once() == "not_modified"  # nothing new ingested
    finally:
        await roomy.close()
    assert ingests == [False, True]
