"""The embedded default's egress: an mTLS endpoint that completes a handshake and closes.

In a cluster the site's gateway owns the egress address; in the embedded default
the operator serves this stand-in so that peers' GridSite probes
(`grid.adapters.tls_probe.probe`) can verify the site's certificate. A probe
sends no application data, so a connection here is a handshake, the session
tickets the server sends after it, a ``close_notify`` and the close.

Each connection runs its handshake over memory BIOs in a plain protocol, without
asyncio's SSL transport, which buffers, flow-controls and schedules callbacks
for data a probe never sends: the server half of a resumed probe costs about a
seventh less. As every listener of Grid, it bounds what a client may hold: a
connection cap counted from TCP accept, a deadline for the handshake, and a most
number of bytes a handshake may send.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

HANDSHAKE_TIMEOUT_S = 5.0
"""Seconds from accept for the handshake to complete; a client that is slower is cut
off. Longer tolerates slow links; every second is a second a slot is held."""
CONNECTIONS_MAX = 64
"""Most connections at once, handshaking ones included; one more is aborted at accept.
Probes are short (one per peer site and probe round), so this is many sites' worth."""
HANDSHAKE_BYTES_MAX = 64 * 1024
"""Most bytes a client may send before its handshake completes (a client hello and a
certificate chain are a few KiB); more closes the connection."""


class _Handshake(asyncio.Protocol):
    """One accepted connection: the server handshake, then ``close_notify`` and close."""

    def __init__(self, listener: EgressListener) -> None:
        self._listener = listener
        self._transport: asyncio.Transport | None = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._obj: ssl.SSLObject | None = None
        self._received = 0
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        if len(self._listener.open) >= self._listener.connections_max:
            self._listener.refused += 1
            transport.abort()
            return
        self._listener.open.add(self)
        self._obj = self._listener.ctx.wrap_bio(self._incoming, self._outgoing, server_side=True)
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self._listener.handshake_timeout_s, transport.abort)

    def data_received(self, data: bytes) -> None:
        if self._obj is None:
            return
        self._received += len(data)
        if self._received > self._listener.handshake_bytes_max:
            self._end(abort=True)
            return
        self._incoming.write(data)
        try:
            self._obj.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except ssl.SSLError:  # the alert, if any, is in the outgoing BIO
            self._end()
            return
        with contextlib.suppress(ssl.SSLError):
            self._obj.unwrap()  # our close_notify; the peer's is not waited for
        self._end()

    def eof_received(self) -> bool:
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._listener.open.discard(self)

    def _flush(self) -> None:
        if self._outgoing.pending and self._transport is not None:
            self._transport.write(self._outgoing.read())

    def _end(self, abort: bool = False) -> None:
        if self._transport is None:
            return
        if abort:
            self._transport.abort()
            return
        self._flush()
        self._transport.close()


class EgressListener:
    """A minimal mTLS endpoint presenting the site certificate at the egress address.

    It completes the handshake (verifying the client's certificate as ``ctx``
    requires) and closes the connection.
    """

    def __init__(
        self,
        ctx: ssl.SSLContext,
        *,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        connections_max: int = CONNECTIONS_MAX,
        handshake_bytes_max: int = HANDSHAKE_BYTES_MAX,
    ) -> None:
        self.ctx = ctx
        self.handshake_timeout_s = handshake_timeout_s
        self.connections_max = connections_max
        self.handshake_bytes_max = handshake_bytes_max
        self.open: set[_Handshake] = set()
        """The connections accepted and not yet closed."""
        self.refused = 0
        """Connections aborted at accept because ``connections_max`` were open."""
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (0 picks a free port); returns the bound address."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Handshake(self), host, port)
        bound = self._server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    async def stop(self) -> None:
        """Stop listening and cut the connections still open."""
        if self._server is not None:
            self._server.close()
            for connection in list(self.open):
                connection._end(abort=True)
            self.open.clear()
            await self._server.wait_closed()
            self._server = None
