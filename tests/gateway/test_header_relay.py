"""Issue 22.3: headers pass the gateway as multidicts, hop-by-hop ones named in
``Connection`` are dropped, both ways (a real provider on loopback)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict

from grid.gateway.config import Cluster
from grid.gateway.settings import GatewaySettings
from grid.gateway.upstream import Upstream
from grid.testing.edge_rig import Answer, chat, edge_rig

SECRET = "do-not-forward-7f3a"


def _provider(status: int, received: list[CIMultiDict[str]]) -> Answer:
    async def answer(request: web.Request) -> web.StreamResponse:
        received.append(request.headers.copy())
        headers = CIMultiDict(
            [
                ("Set-Cookie", "a=1; Path=/"),
                ("Set-Cookie", "b=2; Path=/"),
                ("Connection", "x-internal"),
                ("X-Internal", "provider-only"),
                ("X-Kept", "yes"),
            ]
        )
        body = {"usage": {"prompt_tokens": 1, "completion_tokens": 1}}
        return web.json_response(body, status=status, headers=headers)

    return answer


@pytest.mark.parametrize("status", [200, 429])
async def test_connection_listed_headers_stay_behind_and_repeats_survive(
    tmp_path: Path, status: int
) -> None:
    received: list[CIMultiDict[str]] = []
    sent = CIMultiDict(
        [
            ("Connection", "x-secret, X-Other"),
            ("X-Secret", SECRET),
            ("X-Other", "hop"),
            ("X-Tag", "first"),
            ("X-Tag", "second"),
        ]
    )
    async with (
        edge_rig(tmp_path, _provider(status, received)) as rig,
        aiohttp.ClientSession() as http,
        http.post(f"http://{rig.public}/v1/chat/completions", json=chat(), headers=sent) as r,
    ):
        assert r.status == status
        cookies = r.headers.getall("Set-Cookie", [])
        relayed = r.headers.copy()
        await r.read()
    assert cookies == ["a=1; Path=/", "b=2; Path=/"]
    assert "X-Internal" not in relayed
    assert relayed["X-Kept"] == "yes"
    (upstream,) = received
    assert "X-Secret" not in upstream and "X-Other" not in upstream
    assert all(SECRET not in value for value in upstream.values())
    assert upstream.getall("X-Tag") == ["first", "second"]
    assert upstream["Authorization"].startswith("Bearer ")


async def test_a_clusters_cookie_never_reaches_another_clients_request() -> None:
    received: list[CIMultiDict[str]] = []
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _provider(200, received))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = int(runner.addresses[0][1])
    # A named host: aiohttp's default jar would keep cookies of a name, not of an IP.
    upstream = Upstream(Cluster("c1", (f"localhost:{port}",)), GatewaySettings())
    try:
        for _ in range(2):  # two clients' requests through the same pooled session
            url = f"{upstream.next_base()}/v1/chat/completions"
            async with upstream.open().post(url, json=chat()) as r:
                assert r.headers.getall("Set-Cookie", []) == ["a=1; Path=/", "b=2; Path=/"]
                await r.read()
    finally:
        await upstream.close()
        await runner.cleanup()
    assert len(received) == 2
    assert "Cookie" not in received[1], received[1].getall("Cookie")


async def test_a_reloaded_configs_credentials_apply_to_the_next_request(tmp_path: Path) -> None:
    async with edge_rig(tmp_path) as rig, aiohttp.ClientSession() as http:
        url = f"http://{rig.public}/v1/chat/completions"
        proxy = rig.gateway.proxy
        running = proxy.config
        proxy.config = replace(running, credentials={})  # as a praxis.yaml reload does
        async with http.post(url, json=chat()) as r:
            assert r.status == 502  # the candidate's credential is no longer configured
        proxy.config = running
        async with http.post(url, json=chat()) as r:
            assert r.status == 200
    assert len(rig.provider.seen) == 1
