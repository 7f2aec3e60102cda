"""The private parts of asyncio and aiohttp the edge uses, pinned to the versions checked.

`grid.adapters.runtime_internals` is the only module that touches them. These
tests fail, by name, when the interpreter or aiohttp differs from the versions
the container ships (its base image and ``deploy/container/requirements.lock``)
or when a private name they rely on has moved.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import sys
from pathlib import Path

import aiohttp
from aiohttp import web

from grid.adapters import runtime_internals
from grid.adapters.runtime_internals import (
    PRIVATE_NAMES,
    TLS_READ_BUFFER_BYTES,
    HeapTrim,
    awaiting_head,
    heads_parsed,
    start_compact_tls,
)
from grid.testing.poll import eventually

from .conftest import SignalsPki

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "container"


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def test_the_interpreter_is_the_containers() -> None:
    found = re.search(r"FROM \S*python:(\d+\.\d+)", (DEPLOY / "Containerfile").read_text())
    assert found is not None
    assert sys.version_info[:2] == _minor(found.group(1)), "re-check runtime_internals"


def test_aiohttp_is_the_locked_minor_release() -> None:
    locked = re.search(r"^aiohttp==(\S+)$", (DEPLOY / "requirements.lock").read_text(), re.M)
    assert locked is not None
    assert _minor(aiohttp.__version__) == _minor(locked.group(1)), "re-check runtime_internals"


def test_every_private_name_is_still_there() -> None:
    for cls, names in PRIVATE_NAMES.items():
        slots = set(getattr(cls, "__slots__", ()))
        init = cls.__init__.__code__.co_names
        for name in names:
            assert hasattr(cls, name) or name in slots or name in init, (cls, name)


async def test_compact_tls_upgrades_with_the_small_buffer(signals_pki: SignalsPki) -> None:
    leaf = signals_pki.leaves["east"]
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(leaf.cert, leaf.key)
    secured: asyncio.Future[asyncio.Transport | None] = asyncio.get_running_loop().create_future()

    class Upgrade(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.raw = transport

        def data_received(self, data: bytes) -> None:
            raw = self.raw
            assert isinstance(raw, asyncio.Transport)
            task = asyncio.ensure_future(start_compact_tls(raw, self, server_ctx, 5.0, 5.0, data))
            task.add_done_callback(lambda t: secured.set_result(t.result()))

    server = await asyncio.get_running_loop().create_server(Upgrade, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client_ctx = ssl.create_default_context(cafile=str(signals_pki.ca))
    client_ctx.check_hostname = False
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
    transport = await asyncio.wait_for(secured, 5.0)
    assert transport is not None and transport.get_extra_info("ssl_object") is not None
    assert runtime_internals._CompactSSLProtocol.max_size == TLS_READ_BUFFER_BYTES
    writer.close()
    server.close()


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def test_handler_facts_follow_requests() -> None:
    handlers: list[web.RequestHandler] = []
    app = web.Application()
    app.router.add_get("/", _ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    assert runner.server is not None
    base = runner.server

    def factory() -> web.RequestHandler:
        handler = base()
        handlers.append(handler)
        return handler

    server = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/") as resp:
            assert await resp.text() == "ok"
        await eventually(lambda: heads_parsed(handlers[0]) == 1, "one head parsed")
        await eventually(lambda: awaiting_head(handlers[0]), "waiting for the next head")
    server.close()
    await runner.cleanup()


async def test_heap_trim_runs_once_for_many_closes() -> None:
    trim = HeapTrim(delay_s=0.01)
    calls: list[int] = []
    trim._trim = calls.append  # the C call replaced by a recorder
    for _ in range(5):
        trim.connection_closed()
    await eventually(lambda: calls == [0], "one trim")
    trim.cancel()


def test_the_startup_heap_is_frozen_out_of_later_collections() -> None:
    import gc

    from grid.adapters.runtime_internals import YOUNG_COLLECTION_THRESHOLD, freeze_startup_heap

    thresholds = gc.get_threshold()
    try:
        freeze_startup_heap()
        frozen = gc.get_freeze_count()
        assert frozen > 1000  # the interpreter, pytest and Grid's modules at least
        made_since = [[i] for i in range(100)]
        assert gc.get_freeze_count() == frozen  # only what existed is frozen
        assert made_since
        # The young generation is scanned far less often; the older ones as before.
        assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, *thresholds[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
