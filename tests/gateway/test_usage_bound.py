"""Issue 26.9: a provider claiming 2^40 tokens an answer cannot exhaust a tenant."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client import generate_latest

from grid.core.metering.bounds import PROMPT_ALLOWANCE
from grid.core.metering.usage import TOKENS_MAX
from grid.testing.edge_rig import chat, edge_rig


async def huge(_request: web.Request) -> web.StreamResponse:
    usage = {"prompt_tokens": TOKENS_MAX, "completion_tokens": TOKENS_MAX}
    return web.json_response({"choices": [], "usage": usage})


async def test_three_huge_answers_are_billed_at_their_bound_and_counted(tmp_path: Path) -> None:
    body = chat(max_tokens=100)
    size = len(json.dumps(body).encode())
    async with edge_rig(tmp_path, huge) as rig, aiohttp.ClientSession() as http:
        url = f"http://{rig.public}/v1/chat/completions"
        for _ in range(3):
            async with http.post(url, json=body) as resp:
                assert resp.status == 200
                await resp.read()
        meter = rig.gateway.meter
        assert meter.implausible == {"c1": 3}
        assert meter.tokens == {
            ("other", "c1", "input"): 3 * (size + PROMPT_ALLOWANCE),
            ("other", "c1", "output"): 3 * 100,
        }
        text = generate_latest(rig.gateway.metrics.registry).decode()
        assert 'grid_gateway_usage_implausible_total{cluster="c1"} 3.0' in text


async def test_a_plausible_answer_is_billed_as_reported(tmp_path: Path) -> None:
    async with edge_rig(tmp_path) as rig, aiohttp.ClientSession() as http:
        url = f"http://{rig.public}/v1/chat/completions"
        async with http.post(url, json=chat(max_tokens=5)) as resp:
            assert resp.status == 200
        assert rig.gateway.meter.tokens == {
            ("other", "c1", "input"): 7,
            ("other", "c1", "output"): 3,
        }
        assert rig.gateway.meter.implausible == {}
