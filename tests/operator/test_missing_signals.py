"""A missing signal is neutral (0.5), never zero, in both modes (seed 000, SPEC-DECISIONS §4).

The provider here exposes only its queue and KV-cache gauges: no prefix-cache
counters and no latency histogram. Under gossip its overlay candidate scores
those two at 0.5; under poll ``/v1/site/signals`` carries no key for them (not
a zero, not a null) and the candidate is admitted as if they were neutral.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from grid.adapters.tls_probe import client_context
from grid.demo.plan import MODEL, NETWORK
from grid.testing.poll import eventually

from .test_signal_lifecycle import east as running_east

PARTIAL_METRICS = """\
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 2
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.25
"""
WEIGHTS = {"locality": 3, "queue_depth": 3, "kv_cache": 2, "prefix_cache": 2, "latency": 2}
WEIGHT_SUM = sum(WEIGHTS.values()) + 1  # cost weighs 1


@contextlib.asynccontextmanager
async def partial_provider() -> AsyncIterator[int]:
    """A provider whose /metrics has the queue and KV-cache gauges only."""

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=PARTIAL_METRICS, content_type="text/plain")

    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def provider_doc(port: int) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "InferenceProvider",
        "metadata": {"name": "partial", "labels": {"grid.praxis-proxy.io/site": "east"}},
        "spec": {
            "gridNetworkRef": NETWORK,
            "backendKind": "local",
            "providerKind": "self_hosted",
            "models": [{"name": MODEL, "capabilities": ["chat"], "contextWindow": 8192}],
            "endpoint": f"http://127.0.0.1:{port}",
            "healthCheck": {"path": "/health", "interval": "200ms", "timeout": "200ms"},
            "metricsConfig": {
                "path": "/metrics",
                "interval": "200ms",
                "timeout": "200ms",
                "queueCapacity": 8,
            },
        },
    }


def _candidate(overlay_dir: Path) -> dict[str, Any] | None:
    try:
        overlay = json.loads((overlay_dir / "grid-config.json").read_text())
    except (OSError, ValueError):
        return None
    return next((c for c in overlay["candidates"] if c["cluster"] == "partial"), None)


async def test_missing_signals_score_neutral_under_gossip(
    tmp_path: Path,
) -> None:
    async with partial_provider() as port, running_east(tmp_path) as site:
        await site.store.create(provider_doc(port))
        overlay_dir = site.mesh.plan.sites["east"].overlay_dir

        def scraped() -> bool:
            found = _candidate(overlay_dir)
            kv = found.get("score_breakdown", {}).get("kv_cache") if found else None
            return kv is not None and abs(kv - (1 - 0.25) * 2 / WEIGHT_SUM) < 1e-9

        # The exposed signals are scored from their values once the first scrape lands.
        await eventually(scraped, "the partial provider is scored from its scrape")
        breakdown = _candidate(overlay_dir)["score_breakdown"]  # type: ignore[index]
        for signal in ("prefix_cache", "latency", "cost"):
            weight = WEIGHTS.get(signal, 1)
            assert abs(breakdown[signal] - 0.5 * weight / WEIGHT_SUM) < 1e-9, signal
        assert abs(breakdown["queue_depth"] - (1 - 0.25) * 3 / WEIGHT_SUM) < 1e-9


async def test_missing_signals_are_absent_keys_under_poll(
    tmp_path: Path,
) -> None:
    async with partial_provider() as port, running_east(tmp_path, mode="poll") as site:
        await site.store.create(provider_doc(port))
        overlay_dir = site.mesh.plan.sites["east"].overlay_dir
        await eventually(lambda: site.operator.ready, "the operator is ready")
        url = f"https://{site.operator.addresses['signals']}/v1/site/signals"
        context = client_context(site.mesh.pki.ca, site.settings.cert, site.settings.key)  # type: ignore[arg-type, union-attr]

        async def served() -> bool:
            connector = aiohttp.TCPConnector(ssl=context)
            async with (
                aiohttp.ClientSession(connector=connector) as session,
                session.get(url) as resp,
            ):
                body = await resp.json()
            return any(p["name"] == "partial" and p["signals"] for p in body["providers"])

        await eventually(served, "the partial provider's scrape is served")
        await eventually(lambda: _candidate(overlay_dir) is not None, "partial is rendered")
        candidate = _candidate(overlay_dir)
        assert candidate is not None and "score" not in candidate
        assert candidate["admission_state"] == "new_and_existing"
        connector = aiohttp.TCPConnector(ssl=context)
        async with aiohttp.ClientSession(connector=connector) as session:
            for scope in ("site", "grid"):
                async with session.get(url, params={"scope": scope}) as resp:
                    raw = await resp.text()
                entry = next(p for p in json.loads(raw)["providers"] if p["name"] == "partial")
                assert entry["signals"] == {"queue_depth": 0.25, "kv_cache_utilization": 0.25}
                assert "null" not in raw
