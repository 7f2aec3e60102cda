"""Starting the small HTTP endpoints: the bound address, and a failed bind."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from grid.adapters.web_site import start_site


def _app() -> web.Application:
    async def hello(_request: web.Request) -> web.Response:
        return web.Response(text="hello")

    app = web.Application()
    app.router.add_get("/", hello)
    return app


async def test_port_zero_binds_a_free_port_and_reports_it() -> None:
    runner, host, port = await start_site(_app(), "127.0.0.1", 0)
    try:
        assert host == "127.0.0.1" and port > 0
        async with aiohttp.ClientSession() as session, session.get(f"http://{host}:{port}/") as r:
            assert await r.text() == "hello"
    finally:
        await runner.cleanup()


async def test_a_port_in_use_raises_and_leaves_the_first_listener_serving() -> None:
    runner, host, port = await start_site(_app(), "127.0.0.1", 0)
    try:
        with pytest.raises(OSError):
            await start_site(_app(), host, port)
        async with aiohttp.ClientSession() as session, session.get(f"http://{host}:{port}/") as r:
            assert r.status == 200
    finally:
        await runner.cleanup()
