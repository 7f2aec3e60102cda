"""The gateway's plaintext listeners: a connection cap and a header deadline.

Each accepted TCP connection takes a slot from a `ConnectionGate`; past the
cap it is aborted before a byte is read. Until the first request head is
complete (a blank line seen) a deadline of ``header_read_timeout_s`` runs, so
a connection that trickles its headers is closed. After that, aiohttp's
keep-alive timeout (``idle_timeout_s``) closes idle connections and bounds the
heads of later requests. These three limits live in `ListenerLimits` and this
module only, so one shared listener policy can replace them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from aiohttp import web

from grid.gateway.settings import ListenerLimits

_HEAD_END = b"\r\n\r\n"


class ConnectionGate:
    """Counts open connections against ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.refused = 0
        self.header_timeouts = 0


class _Connection(asyncio.Protocol):
    """One accepted connection: a slot, a first-head deadline, then aiohttp."""

    __slots__ = (
        "_deadline",
        "_gate",
        "_head_seen",
        "_holds",
        "_inner",
        "_tail",
        "_timeout_s",
        "_transport",
    )

    def __init__(self, inner: asyncio.Protocol, gate: ConnectionGate, timeout_s: float) -> None:
        self._inner = inner
        self._gate = gate
        self._timeout_s = timeout_s
        self._head_seen = False
        self._tail = b""
        self._deadline: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None
        self._holds = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = cast(asyncio.Transport, transport)
        gate = self._gate
        if gate.open >= gate.limit:
            gate.refused += 1
            raw.abort()
            return
        gate.open += 1
        self._holds = True
        self._transport = raw
        self._deadline = asyncio.get_running_loop().call_later(self._timeout_s, self._expire)
        self._inner.connection_made(raw)

    def _expire(self) -> None:
        self._deadline = None
        if not self._head_seen and self._transport is not None:
            self._gate.header_timeouts += 1
            self._transport.abort()

    def data_received(self, data: bytes) -> None:
        if not self._head_seen:
            window = self._tail + data
            if _HEAD_END in window:
                self._head_seen = True
                if self._deadline is not None:
                    self._deadline.cancel()
                    self._deadline = None
            else:
                self._tail = window[-3:]
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self._holds:
            self._holds = False
            self._gate.open -= 1
            self._inner.connection_lost(exc)


class Listener:
    """An aiohttp application served on ``host:port`` under `ListenerLimits`."""

    def __init__(self, app: web.Application, limits: ListenerLimits, shutdown_s: float) -> None:
        self.limits = limits
        self.gate = ConnectionGate(limits.connections_max)
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=shutdown_s,
            keepalive_timeout=limits.idle_timeout_s,
        )
        self._server: asyncio.base_events.Server | None = None
        self.address = ""

    async def start(self, host: str, port: int) -> str:
        """Bind and serve; returns ``host:port`` as bound."""
        await self._runner.setup()
        handler = self._runner.server
        assert handler is not None
        make: Callable[[], asyncio.Protocol] = handler
        timeout = self.limits.header_read_timeout_s
        gate = self.gate
        try:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: _Connection(make(), gate, timeout),
                host,
                port,
                reuse_address=True,
                backlog=1024,
            )
        except OSError:
            await self._runner.cleanup()
            raise
        bound = self._server.sockets[0].getsockname()
        self.address = f"{bound[0]}:{bound[1]}"
        return self.address

    def close(self) -> None:
        """Stop accepting new connections (in-flight ones continue)."""
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish within the shutdown budget."""
        self.close()
        await self._runner.cleanup()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
