"""The demo's traffic generator authenticates: each request carries one tenant's client key."""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from grid.demo.traffic import send_traffic
from grid.testing.poll import eventually


async def test_every_request_carries_a_tenant_key_and_no_tenant_header() -> None:
    seen: list[tuple[str | None, str | None]] = []

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        seen.append((request.headers.get("Authorization"), request.headers.get("x-grid-tenant")))
        return web.json_response({"choices": []})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    keys = {"acme": "grid-acme-key", "globex": "grid-globex-key"}
    task = asyncio.create_task(send_traffic([f"127.0.0.1:{port}"], 200.0, ("m", "api-m"), keys))
    try:
        await eventually(lambda: len(seen) >= 6, "six requests received")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await runner.cleanup()
    assert {auth for auth, _tenant in seen} == {f"Bearer {k}" for k in keys.values()}
    assert all(tenant is None for _auth, tenant in seen)


async def test_no_keys_sends_nothing() -> None:
    async with asyncio.timeout(1):
        await send_traffic(["127.0.0.1:9"], 10.0, ("m", "api-m"), {})
