"""Agent discoveries reuse kept connections: real servers on 127.0.0.1 behind a counter.

Every discovery of a tool provider is an MCP session (initialize, tools/list,
end) and of an agent a GET of its card. A forwarder in front of the server counts
the TCP connections made, and what the client sends, so the credential each
discovery carries can be checked on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp

from grid.adapters.agent_discovery import McpSession, list_mcp_tools, read_agent_card
from grid.adapters.probe_sessions import PROBE_KEEPALIVE_S, probe_session
from grid.testing.hostile_mcp import agent_card_app

from .test_agent_discovery import card_json, mcp_server, serve


class Counter:
    """A TCP forwarder that counts connections and keeps the bytes clients sent."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split("/")[0].split(":")
        self.upstream = (host, int(port))
        self.accepted = 0
        self.sent = bytearray()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, keep: bool) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    if keep:
                        self.sent.extend(data)
                    dst.write(data)
                    await dst.drain()
            dst.close()

        tasks = [
            asyncio.create_task(pipe(reader, up_writer, True)),
            asyncio.create_task(pipe(up_reader, writer, False)),
        ]
        self._pipes.update(tasks)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._pipes:
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        for writer in self._writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()


@contextlib.asynccontextmanager
async def counted(upstream: str) -> AsyncIterator[tuple[Counter, str]]:
    counter = Counter(upstream)
    address = await counter.start()
    try:
        yield counter, address
    finally:
        await counter.stop()


async def test_five_mcp_discoveries_over_kept_connections() -> None:
    async with mcp_server() as url, counted(url) as (counter, address):
        endpoint = f"http://{address}/mcp"
        # A new credential opens a new session each time, over the same kept pool.
        session = McpSession(endpoint, None, keepalive_s=PROBE_KEEPALIVE_S)
        try:
            for i in range(5):
                tools = await asyncio.wait_for(session.list_tools({"x-api-key": f"key-{i}"}), 30)
                assert len(tools) == 2
        finally:
            await session.close()
        kept = counter.accepted
        sent = bytes(counter.sent)
    async with mcp_server() as url, counted(url) as (fresh, address):
        for _ in range(5):
            await asyncio.wait_for(list_mcp_tools(f"http://{address}/mcp", {}, None), 30)
        unkept = fresh.accepted
    print(f"5 MCP discoveries: {kept} connections kept-alive, {unkept} without")
    assert kept < unkept
    # Each discovery's own credential, and only its own, on its requests.
    for i in range(5):
        assert f"x-api-key: key-{i}".encode() in sent.lower()


async def test_ten_card_reads_make_one_connection_each_with_its_own_header() -> None:
    async with serve(agent_card_app(card_json)) as base, counted(base) as (counter, address):
        session = probe_session()
        try:
            for i in range(10):
                headers = {"Authorization": f"Bearer token-{i}"}
                card = await read_agent_card(session, f"http://{address}", headers, None)
                assert card.skills == ["plan-trip"]
        finally:
            await session.close()
        assert counter.accepted == 1
        sent = bytes(counter.sent)
    for i in range(10):
        assert sent.count(f"Bearer token-{i}\r\n".encode()) == 1
    assert isinstance(session, aiohttp.ClientSession) and not session.headers
