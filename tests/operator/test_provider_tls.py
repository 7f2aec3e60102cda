"""Health checks and scrapes over real HTTPS with a client certificate (§2a).

The provider is an aiohttp server on 127.0.0.1 whose TLS context requires a
client certificate from the dev CA. Its CA bundle and the scraper's certificate
and key live in Secrets in the store, as ``healthCheck.tls`` and
``metricsConfig.tls`` name them; the controller builds its SSL context from them.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from grid.adapters.provider_tls import ProviderTlsError, provider_ssl_context
from grid.adapters.scrape import ProviderScraper, ScrapeError, check_health
from grid.adapters.tls_probe import server_context
from grid.core.resources import API_VERSION, SITE_LABEL, InferenceProvider
from grid.core.resources.provider_spec import HealthCheck, MetricsConfig, ProviderTls
from grid.operator.providers import ProviderController
from grid.testing.poll import eventually

EXPOSITION = """\
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="llama-pool"} 8
vllm:num_requests_waiting{model_name="other-pool"} 64
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="llama-pool"} 0.25
vllm:kv_cache_usage_perc{model_name="other-pool"} 0.95
"""

TLS = {
    "caSecretRef": {"name": "vllm-ca", "namespace": "ns", "key": "ca.crt"},
    "clientCertificateSecretRef": {
        "name": "scraper",
        "namespace": "ns",
        "certificateKey": "tls.crt",
        "privateKeyKey": "tls.key",
    },
}


class Provider:
    """An HTTPS provider requiring client certificates; ``failing`` breaks /metrics."""

    def __init__(self) -> None:
        self.failing = False
        self.peers: list[dict[str, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/health", self.health)
        return app

    async def metrics(self, request: web.Request) -> web.Response:
        self.peers.append(request.transport.get_extra_info("peercert"))  # type: ignore[union-attr]
        if self.failing:
            return web.Response(status=503)
        return web.Response(text=EXPOSITION)

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")


@pytest.fixture
async def https(pki: Any) -> AsyncIterator[tuple[Provider, str]]:
    """West's certificate serves HTTPS on a free loopback port, requiring a client cert."""
    west = pki.sites["west"]
    provider = Provider()
    runner = web.AppRunner(provider.app())
    await runner.setup()
    site = web.TCPSite(
        runner, "127.0.0.1", 0, ssl_context=server_context(pki.ca, west.cert, west.key)
    )
    await site.start()
    host, port = runner.addresses[0][:2]
    yield provider, f"https://{host}:{port}"
    await runner.cleanup()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
async def secrets(store: Any, pki: Any) -> Any:
    """The CA bundle and east's client certificate as Secrets in the store."""
    east = pki.sites["east"]
    await store.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "vllm-ca", "namespace": "ns"},
            "data": {"ca.crt": b64(pki.ca.read_bytes())},
        }
    )
    await store.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "scraper", "namespace": "ns"},
            "data": {"tls.crt": b64(east.cert.read_bytes()), "tls.key": b64(east.key.read_bytes())},
        }
    )
    return store


async def test_a_scrape_and_a_health_check_over_https_present_the_client_certificate(
    secrets: Any, https: tuple[Provider, str]
) -> None:
    provider, url = https
    tls = ProviderTls.model_validate(TLS)
    ctx = await provider_ssl_context(secrets, tls)
    config = MetricsConfig.model_validate(
        {"metricsEndpoint": url, "tls": TLS, "poolName": "llama-pool", "queueCapacity": 16}
    )
    async with aiohttp.ClientSession() as session:
        scraped = await ProviderScraper(session, "", config, ctx).scrape()
        health = HealthCheck.model_validate({"endpoint": url, "tls": TLS})
        assert (await check_health(session, "https://unused.invalid", health, ctx)).healthy
    # poolName: only llama-pool's series count (8/16 queued, 25% KV cache).
    assert scraped.values.queue_depth == 0.5
    assert scraped.values.kv_cache_utilization == 0.25
    (peer,) = provider.peers
    assert ("commonName", "east") in [pair for rdn in peer["subject"] for pair in rdn]


async def test_without_the_client_certificate_the_provider_refuses(
    secrets: Any, https: tuple[Provider, str]
) -> None:
    _provider, url = https
    ca_only = ProviderTls.model_validate({"caSecretRef": TLS["caSecretRef"]})
    ctx = await provider_ssl_context(secrets, ca_only)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(ScrapeError) as info:
            await ProviderScraper(session, url, MetricsConfig(), ctx).scrape()
        assert info.value.reason == "connect"
        # Without the CA, the provider's certificate is not trusted either.
        with pytest.raises(ScrapeError):
            await ProviderScraper(session, url, MetricsConfig()).scrape()


async def test_a_missing_secret_key_is_named_without_bytes(secrets: Any, pki: Any) -> None:
    bad = ProviderTls.model_validate(
        {
            "clientCertificateSecretRef": TLS["clientCertificateSecretRef"]
            | {"privateKeyKey": "nope"}
        }
    )
    with pytest.raises(ProviderTlsError) as info:
        await provider_ssl_context(secrets, bad)
    assert "Secret ns/scraper key 'nope'" in str(info.value)
    assert "PRIVATE" not in str(info.value)
    gone = ProviderTls.model_validate({"caSecretRef": {"name": "absent", "namespace": "ns"}})
    with pytest.raises(ProviderTlsError, match="not found"):
        await provider_ssl_context(secrets, gone)


def provider_doc(url: str, stale_s: int) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceProvider",
        "metadata": {"name": "vllm", "labels": {SITE_LABEL: "east"}},
        "spec": {
            "gridNetworkRef": "prod",
            "backendKind": "local",
            "providerKind": "self_hosted",
            "models": [{"name": "llama"}],
            "healthCheck": {"endpoint": url, "interval": "100ms", "timeout": "100ms", "tls": TLS},
            "metricsConfig": {
                "metricsEndpoint": url,
                "interval": "100ms",
                "timeout": "100ms",
                "tls": TLS,
                "poolName": "llama-pool",
                "queueCapacity": 16,
                "staleMetricsSeconds": stale_s,
            },
        },
    }


async def test_the_operator_scrapes_over_tls_and_a_stale_sample_counts_as_missing(
    secrets: Any, https: tuple[Provider, str]
) -> None:
    provider, url = https
    seen: list[Any] = []
    ctl = ProviderController(secrets, "east", lambda _n, r: seen.append(r), refresh_s=0.05)
    await ctl.start()
    try:
        doc = await secrets.create(provider_doc(url, stale_s=1))
        ctl.sync([InferenceProvider.model_validate(doc)])
        good = await eventually(
            lambda: seen and seen[-1] is not None and seen[-1].signals.queue_depth == 0.5,
            "a TLS scrape of the pool",
        )
        assert good
        provider.failing = True
        failed_at, handed_on = time.time(), len(seen)
        # Within staleMetricsSeconds the last good sample stands in, with its own time
        # (a record handed on since the failure; the one before it may be younger)...
        carried = await eventually(
            lambda: len(seen) > handed_on and seen[-1].observed_at < failed_at and seen[-1],
            "the last sample carried over",
        )
        assert carried.signals.queue_depth == 0.5
        # ...and once it is older, the signals are missing.
        missing = await eventually(
            lambda: seen[-1].signals.queue_depth is None and seen[-1], "the stale sample dropped"
        )
        # Dropped only once the last good sample is staleMetricsSeconds old.
        assert missing.observed_at - carried.observed_at >= 1
    finally:
        await ctl.stop()
