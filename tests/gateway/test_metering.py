"""Tenant metering and budget enforcement at the gateway, in process, against the mock provider."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from grid.demo.mock_provider import MockProvider, MockSettings
from grid.gateway.config import load_config
from grid.gateway.server import Gateway
from grid.gateway.settings import GatewaySettings
from grid.testing.gateway import MODEL, Upstream, candidate, envelope, overlay, render_praxis
from grid.testing.gateway import write_json as write_document
from grid.testing.poll import eventually

SERIES = re.compile(
    r'^grid_gateway_tenant_tokens_total\{cluster="([^"]+)",direction="([^"]+)",tenant="([^"]+)"\}'
    r" ([0-9.e+]+)$",
    re.M,
)


@dataclass
class Rig:
    gateway: Gateway
    public: str
    admin: str
    budgets: Path
    tmp: Path
    config: Path

    async def tokens(self, http: aiohttp.ClientSession) -> dict[tuple[str, str, str], int]:
        async with http.get(f"http://{self.admin}/metrics") as resp:
            text = await resp.text()
        return {(t, c, d): int(float(v)) for c, d, t, v in SERIES.findall(text)}


def _settings(tmp: Path) -> GatewaySettings:
    return GatewaySettings(overlay_poll_interval_s=0.05, state_dir=str(tmp / "state"))


async def _start(config: Path, tmp: Path) -> Gateway:
    gateway = Gateway(load_config(config, 1 << 20), _settings(tmp), config)
    await gateway.start()
    return gateway


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    provider = MockProvider(MockSettings(model=MODEL, service_time_s=0.0))
    _host, port = await provider.start()
    upstream = Upstream("c1")
    upstream.port = port
    overlay_path = tmp_path / "grid-overlay.json"
    write_document(overlay_path, envelope(overlay(candidate("c1"))))
    budgets = tmp_path / "grid-budgets.json"
    view = [{"tenant_id": "acme", "spend_ratio": 0.2}, {"tenant_id": "zeta", "spend_ratio": 0.0}]
    write_document(budgets, {"network": "net", "budgets": view, "generated_at": "t"})
    rendered, public, admin = render_praxis(
        overlay(candidate("c1")), [upstream], tmp_path, overlay_file=overlay_path
    )
    config = tmp_path / "praxis.yaml"
    config.write_text(rendered.text)
    gateway = await _start(config, tmp_path)
    rig = Rig(gateway, public, admin, budgets, tmp_path, config)
    yield rig
    await rig.gateway.stop()
    await provider.stop()


def _body(content: str, **extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


async def _chat(
    http: aiohttp.ClientSession, rig: Rig, tenant: str | None, **extra: object
) -> tuple[int, bytes]:
    headers = {"x-grid-tenant": tenant} if tenant else {}
    url = f"http://{rig.public}/v1/chat/completions"
    async with http.post(url, json=_body("x" * 400, **extra), headers=headers) as resp:
        return resp.status, await resp.read()


async def test_answers_are_metered_per_tenant_and_unknown_tenants_count_as_other(rig: Rig) -> None:
    async with aiohttp.ClientSession() as http:
        status, body = await _chat(http, rig, "acme")
        assert status == 200
        usage = json.loads(body)["usage"]
        await _chat(http, rig, "mallory")
        await _chat(http, rig, None)
        tokens = await rig.tokens(http)
    assert tokens[("acme", "c1", "input")] == usage["prompt_tokens"] == 100
    assert tokens[("acme", "c1", "output")] == usage["completion_tokens"]
    assert tokens[("other", "c1", "input")] == 200
    assert not any(t == "mallory" for t, _c, _d in tokens)


async def test_a_stream_is_metered_from_its_usage_chunk_which_the_client_never_sees(
    rig: Rig,
) -> None:
    async with aiohttp.ClientSession() as http:
        status, body = await _chat(http, rig, "acme", stream=True)
        assert status == 200
        assert b'"usage"' not in body and body.endswith(b"data: [DONE]\n\n")
        tokens = await rig.tokens(http)
        assert tokens[("acme", "c1", "input")] == 100
        # A client that asks for the usage chunk gets it, and it is counted once.
        options = {"include_usage": True}
        status, body = await _chat(http, rig, "acme", stream=True, stream_options=options)
        assert b'"usage"' in body
        tokens = await rig.tokens(http)
        assert tokens[("acme", "c1", "input")] == 200


async def test_an_exhausted_tenant_gets_429_and_others_are_untouched(rig: Rig) -> None:
    view = [{"tenant_id": "acme", "spend_ratio": 1.0}, {"tenant_id": "zeta", "spend_ratio": 0.5}]
    write_document(rig.budgets, {"network": "net", "budgets": view, "generated_at": "t2"})
    await eventually(lambda: rig.gateway.meter.exhausted == {"acme"}, "view reloaded")
    async with aiohttp.ClientSession() as http:
        status, body = await _chat(http, rig, "acme")
        assert status == 429
        assert json.loads(body)["error"]["code"] == "budget_exhausted"
        assert (await _chat(http, rig, "zeta"))[0] == 200
        assert (await _chat(http, rig, None))[0] == 200
    # A broken view keeps the last good one.
    rig.budgets.write_text("{not json")
    await eventually(lambda: rig.gateway.meter.view_rejected == 1, "broken view seen")
    assert rig.gateway.meter.exhausted == {"acme"}


async def test_a_graceful_restart_keeps_the_counters(rig: Rig) -> None:
    async with aiohttp.ClientSession() as http:
        await _chat(http, rig, "acme")
        before = await rig.tokens(http)
        await rig.gateway.stop()
        rig.gateway = await _start(rig.config, rig.tmp)
        assert await rig.tokens(http) == before
        await _chat(http, rig, "acme")
        after = await rig.tokens(http)
    assert after[("acme", "c1", "input")] == 2 * before[("acme", "c1", "input")]
    assert not (rig.tmp / "state" / "tenant-tokens.json").exists()  # taken up once
