"""The scraper against real HTTP servers on loopback: the mock provider and odd ones."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from grid.adapters.scrape import (
    METRICS_BODY_MAX_BYTES,
    ProviderScraper,
    ScrapeError,
    ScrapeFailure,
    check_health,
    join_url,
    parse_exposition,
)
from grid.core.resources.provider_spec import HealthCheck, MetricsConfig
from grid.core.routing.metrics_mapping import ScrapedSignals
from grid.demo.mock_provider import MockProvider, MockSettings
from grid.testing.poll import eventually

MODEL = "m1"


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def mock(**options: Any) -> tuple[MockProvider, str]:
    provider = MockProvider(MockSettings(MODEL, **options))
    host, port = await provider.start("127.0.0.1", 0)
    return provider, f"http://{host}:{port}"


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


async def test_scraping_the_mock_provider_tracks_its_real_load(
    http: aiohttp.ClientSession,
) -> None:
    provider, base = await mock(capacity=1, service_time_s=0.2)
    config = MetricsConfig.model_validate({"queueCapacity": 4, "timeout": "2s"})
    scraper = ProviderScraper(http, base, config)
    try:
        idle = await scraper.scrape()
        assert idle.values.queue_depth == 0.0
        assert idle.values.kv_cache_utilization == pytest.approx(0.05)
        assert idle.values.prefix_cache_hit_ratio is None  # no queries yet: missing, not 0
        assert idle.values.p99_latency_ms is None  # no observations yet

        async def send(i: int) -> None:
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"prompt {i}"}]}
            async with http.post(f"{base}/v1/chat/completions", json=body) as resp:
                assert resp.status == 200

        load = asyncio.gather(*(send(i) for i in range(3)))

        async def busy_scrape() -> ScrapedSignals | None:
            busy = await scraper.scrape()
            return busy if busy.values.queue_depth == 0.5 else None

        busy = await eventually(busy_scrape, "a queue depth of 0.5 under load", interval_s=0.01)
        assert busy.values.kv_cache_utilization == pytest.approx(0.75)
        await load
        after = await scraper.scrape()
        assert after.values.queue_depth == 0.0
        assert after.values.prefix_cache_hit_ratio == 0.0  # three distinct prompts
        assert after.values.p99_latency_ms is not None
        assert 150 <= after.values.p99_latency_ms <= 1000
    finally:
        await provider.stop()


async def test_health_checks_follow_the_profile(http: aiohttp.ClientSession) -> None:
    steady, steady_base = await mock()
    failing, failing_base = await mock(profile="failing")
    try:
        ok = await check_health(http, steady_base, HealthCheck())
        assert (ok.healthy, ok.status, ok.failure) == (True, 200, None)
        bad = await check_health(http, failing_base)
        assert (bad.healthy, bad.status, bad.failure) == (False, 503, ScrapeFailure.HTTP_STATUS)
    finally:
        await steady.stop()
        await failing.stop()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_failures_have_closed_reasons(http: aiohttp.ClientSession) -> None:
    never = asyncio.Event()
    # Built before the server starts and sent at once, just past the bound.
    oversized = b"x 1\n" * (METRICS_BODY_MAX_BYTES // 4 + 1)

    async def hang(_request: web.Request) -> web.Response:
        await never.wait()
        return web.Response(text="")

    async def huge(_request: web.Request) -> web.Response:
        return web.Response(body=oversized, content_type="text/plain")

    async def garbage(_request: web.Request) -> web.Response:
        return web.Response(text="this is { not prometheus\n")

    app = web.Application()
    app.router.add_get("/hang/metrics", hang)
    app.router.add_get("/huge/metrics", huge)
    app.router.add_get("/garbage/metrics", garbage)
    runner, base = await serve(app)
    # Only the hanging endpoint meets the short deadline; every other case has a
    # deadline it cannot reach on a loaded machine, so its reason is the only outcome.
    fast = MetricsConfig.model_validate({"timeout": "200ms"})
    patient = MetricsConfig.model_validate({"timeout": "60s", "interval": "60s"})
    cases = {
        f"{base}/hang": (fast, ScrapeFailure.TIMEOUT),
        f"{base}/huge": (patient, ScrapeFailure.TOO_LARGE),
        f"{base}/garbage": (patient, ScrapeFailure.PARSE),
        f"{base}/missing": (patient, ScrapeFailure.HTTP_STATUS),
        f"http://127.0.0.1:{closed_port()}": (patient, ScrapeFailure.CONNECT),
    }
    try:
        for url, (config, reason) in cases.items():
            with pytest.raises(ScrapeError) as failed:
                await ProviderScraper(http, url, config).scrape()
            assert failed.value.reason is reason, url
        timeout = await check_health(
            http, f"{base}/hang", HealthCheck(path="/metrics", timeout="200ms")
        )
        assert timeout.failure is ScrapeFailure.TIMEOUT
        refused = await check_health(http, f"http://127.0.0.1:{closed_port()}")
        assert refused.failure is ScrapeFailure.CONNECT
    finally:
        never.set()
        await runner.cleanup()


async def test_metrics_endpoint_overrides_the_provider_endpoint(
    http: aiohttp.ClientSession,
) -> None:
    provider, base = await mock()
    try:
        config = MetricsConfig.model_validate({"endpoint": base + "/", "path": "/metrics"})
        scraper = ProviderScraper(http, "http://127.0.0.1:1", config)
        assert scraper.url == f"{base}/metrics"
        assert (await scraper.scrape()).values.queue_depth == 0.0
    finally:
        await provider.stop()


def test_urls_join_with_one_slash_and_exposition_parses_vllm_names() -> None:
    assert join_url("http://h:8000/", "/metrics") == "http://h:8000/metrics"
    assert join_url("http://h:8000", "health") == "http://h:8000/health"
    families = parse_exposition(
        "# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total 3\n"
        'vllm:num_requests_waiting{model_name="m"} 2\n'
    )
    names = {s.name for f in families for s in f.samples}
    assert names == {"vllm:prefix_cache_hits_total", "vllm:num_requests_waiting"}
