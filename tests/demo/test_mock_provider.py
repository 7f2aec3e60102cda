"""The mock provider serves OpenAI-shaped answers and metrics driven by real load."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from grid.demo.mock_provider import MockProvider, MockSettings
from grid.testing.poll import eventually

MODEL = "llama-3.1-8b-instruct"


async def start(settings: MockSettings, **options: Any) -> tuple[MockProvider, str]:
    provider = MockProvider(settings, **options)
    host, port = await provider.start("127.0.0.1", 0)
    return provider, f"http://{host}:{port}"


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def scrape(http: aiohttp.ClientSession, base: str) -> dict[str, float]:
    """Every sample of /metrics keyed by name plus sorted labels (model label dropped)."""
    async with http.get(f"{base}/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k != "model_name"}
            suffix = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            values[f"{sample.name}{{{suffix}}}" if suffix else sample.name] = sample.value
    return values


def chat(content: str, model: str = MODEL) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}]}


async def test_chat_completion_has_the_openai_shape(http: aiohttp.ClientSession) -> None:
    provider, base = await start(MockSettings(MODEL, service_time_s=0.0))
    try:
        async with http.post(f"{base}/v1/chat/completions", json=chat("hello")) as resp:
            assert resp.status == 200
            body = await resp.json()
        assert body["object"] == "chat.completion"
        assert body["model"] == MODEL
        assert body["id"].startswith("chatcmpl-")
        assert body["choices"][0]["message"]["role"] == "assistant"
        assert body["choices"][0]["finish_reason"] == "stop"
        usage = body["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        async with http.get(f"{base}/v1/models") as resp:
            assert (await resp.json())["data"][0]["id"] == MODEL
        async with http.post(f"{base}/v1/chat/completions", json=chat("x", "other")) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["type"] == "model_not_found"
        async with http.post(f"{base}/v1/chat/completions", json={"model": MODEL}) as resp:
            assert resp.status == 400
        async with http.post(f"{base}/v1/chat/completions", data=b"not json") as resp:
            assert resp.status == 400
        async with http.get(f"{base}/health") as resp:
            assert resp.status == 200
    finally:
        await provider.stop()


async def test_concurrent_requests_drive_waiting_running_and_latency(
    http: aiohttp.ClientSession,
) -> None:
    provider, base = await start(MockSettings(MODEL, capacity=2, service_time_s=0.3))
    try:
        idle = await scrape(http, base)
        assert idle["vllm:num_requests_waiting"] == 0
        assert idle["vllm:num_requests_running"] == 0
        assert idle["vllm:e2e_request_latency_seconds_count"] == 0

        async def send(i: int) -> int:
            async with http.post(f"{base}/v1/chat/completions", json=chat(f"q{i}")) as resp:
                return resp.status

        requests = asyncio.gather(*(send(i) for i in range(6)))

        async def busy() -> dict[str, float] | None:
            values = await scrape(http, base)
            loaded = values["vllm:num_requests_running"] == 2
            return values if loaded and values["vllm:num_requests_waiting"] >= 1 else None

        loaded = await eventually(busy, "two running and one waiting request")
        assert loaded["vllm:kv_cache_usage_perc"] > idle["vllm:kv_cache_usage_perc"]
        assert await requests == [200] * 6
        done = await scrape(http, base)
        assert done["vllm:num_requests_waiting"] == 0
        assert done["vllm:num_requests_running"] == 0
        assert done["vllm:e2e_request_latency_seconds_count"] == 6
        # Six 0.3 s jobs on two slots: the last waited two rounds, so >= 0.72 s in total.
        assert done["vllm:e2e_request_latency_seconds_sum"] >= 6 * 0.24 + 2 * 0.24 + 2 * 0.48
        assert done["vllm:e2e_request_latency_seconds_bucket{le=0.1}"] == 0
        assert done["vllm:e2e_request_latency_seconds_bucket{le=+Inf}"] == 6
        assert done["vllm:kv_cache_usage_perc"] == idle["vllm:kv_cache_usage_perc"]
    finally:
        await provider.stop()


async def test_repeated_prompts_count_as_prefix_cache_hits(http: aiohttp.ClientSession) -> None:
    provider, base = await start(MockSettings(MODEL, service_time_s=0.0))
    try:
        prompt = "You are a helpful assistant. " * 4
        for _ in range(3):
            async with http.post(f"{base}/v1/chat/completions", json=chat(prompt)) as resp:
                assert resp.status == 200
        values = await scrape(http, base)
        assert values["vllm:prefix_cache_queries_total"] == 3 * (len(prompt) // 4)
        assert (
            0 < values["vllm:prefix_cache_hits_total"] < values["vllm:prefix_cache_queries_total"]
        )
    finally:
        await provider.stop()


async def test_bursty_profile_adds_a_time_varying_load(http: aiohttp.ClientSession) -> None:
    now = [1000.0]
    provider, base = await start(
        MockSettings(MODEL, profile="bursty", capacity=4, burst_period_s=40.0),
        clock=lambda: now[0],
    )
    try:
        trough = await scrape(http, base)
        now[0] += 20.0  # half a period: the crest
        crest = await scrape(http, base)
        now[0] += 20.0
        back = await scrape(http, base)
        assert trough["vllm:num_requests_waiting"] == 0
        assert crest["vllm:num_requests_waiting"] == 8
        assert crest["vllm:kv_cache_usage_perc"] > trough["vllm:kv_cache_usage_perc"] + 0.4
        assert back["vllm:num_requests_waiting"] == 0
    finally:
        await provider.stop()


async def test_failing_profile_is_unhealthy_but_still_exports_metrics(
    http: aiohttp.ClientSession,
) -> None:
    provider, base = await start(MockSettings(MODEL, profile="failing"))
    try:
        async with http.get(f"{base}/health") as resp:
            assert resp.status == 503
        async with http.post(f"{base}/v1/chat/completions", json=chat("hi")) as resp:
            assert resp.status == 503
            assert (await resp.json())["error"]["type"] == "server_error"
        assert "vllm:num_requests_waiting" in await scrape(http, base)
    finally:
        await provider.stop()


def test_settings_reject_unknown_profiles_and_zero_capacity() -> None:
    with pytest.raises(ValueError):
        MockSettings(MODEL, profile="chaotic")
    with pytest.raises(ValueError):
        MockSettings(MODEL, capacity=0)


async def test_streaming_sends_chunks_usage_and_done(http: aiohttp.ClientSession) -> None:
    provider, base = await start(MockSettings(MODEL, service_time_s=0.0))
    try:
        body = {
            **chat("one two three"),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with http.post(f"{base}/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            text = await resp.text()
        events = [e.removeprefix("data: ") for e in text.strip().split("\n\n")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
        assert content == f"[{MODEL}] one two three"
        usage = chunks[-1]["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    finally:
        await provider.stop()


async def test_requests_are_counted_on_stats(http: aiohttp.ClientSession) -> None:
    provider, base = await start(MockSettings(MODEL, service_time_s=0.0))
    try:
        for i in range(3):
            headers = {"x-ai-routing-candidate": "0000beef"} if i else {}
            async with http.post(
                f"{base}/v1/chat/completions", json=chat("x"), headers=headers
            ) as resp:
                await resp.read()
        async with http.get(f"{base}/stats") as resp:
            assert await resp.json() == {"requests": 3, "routed": 2}
        assert (await scrape(http, base))["grid_mock_requests_total"] == 3
    finally:
        await provider.stop()


def test_a_degradation_multiplies_service_times_from_its_start() -> None:
    now = [100.0]
    provider = MockProvider(
        MockSettings(MODEL, service_time_s=1.0, degrade_factor=3.0, degrade_after_s=10.0),
        clock=lambda: now[0],
    )
    assert provider.service_factor() == 1.0
    assert 0.8 <= provider._service_time() <= 1.2
    now[0] = 110.0
    assert provider.service_factor() == 3.0
    assert 2.4 <= provider._service_time() <= 3.6
    provider.degrade(1.0)
    assert provider.service_factor() == 1.0
    provider.degrade(2.0, after_s=5.0)
    now[0] = 114.9
    assert provider.service_factor() == 1.0
    now[0] = 115.0
    assert provider.service_factor() == 2.0
    with pytest.raises(ValueError, match="degrade factor"):
        provider.degrade(0.0)
    with pytest.raises(ValueError, match="degrade factor"):
        MockSettings(MODEL, degrade_factor=float("nan"))


async def test_the_control_route_degrades_and_refuses_bad_bodies(
    http: aiohttp.ClientSession,
) -> None:
    provider, base = await start(MockSettings(MODEL, service_time_s=0.0))
    try:
        url = f"{base}/control/degrade"
        async with http.post(url, json={"factor": 4, "after_s": 0}) as resp:
            assert resp.status == 200
            assert await resp.json() == {"factor": 4.0, "after_s": 0.0}
        assert provider.service_factor() == 4.0
        for bad in ({"after_s": 1}, {"factor": -1}, {"factor": "x"}, [1]):
            async with http.post(url, json=bad) as resp:
                assert resp.status == 400, bad
        assert provider.service_factor() == 4.0
    finally:
        await provider.stop()
