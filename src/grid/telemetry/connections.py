"""The gateway's connection cap, counted from TCP accept, with the TLS handshake bounded.

The listener is a plain TCP server. Each accepted connection first takes a slot
from the `ConnectionGate`; past ``connections_max`` it is aborted before a
single byte is read, so neither idle sockets nor stalled TLS handshakes can pile
up beyond the cap. An admitted connection is then upgraded to TLS with
``loop.start_tls`` within ``header_read_timeout_s``, and only a completed
handshake reaches aiohttp's request handler, which from then on sees an
ordinary TLS transport. The slot is returned when the connection ends, however
it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from typing import cast


class ConnectionGate:
    """Counts open client connections (handshaking or not) against ``connections_max``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.refused = 0

    def enter(self) -> bool:
        """Take a slot for a new connection; False when the gateway is full."""
        if self.open >= self.limit:
            self.refused += 1
            return False
        self.open += 1
        return True

    def leave(self) -> None:
        """Give a connection's slot back."""
        self.open -= 1


class GatedConnection(asyncio.Protocol):
    """One accepted TCP connection: a slot, a bounded TLS handshake, then aiohttp.

    This object is the TCP protocol until the handshake starts and then the
    application protocol of the TLS layer, forwarding every event to the inner
    (aiohttp) protocol once the handshake is done.
    """

    def __init__(
        self,
        inner: Callable[[], asyncio.Protocol],
        gate: ConnectionGate,
        ssl_context: ssl.SSLContext,
        handshake_timeout_s: float,
        handshakes: set[asyncio.Task[None]],
    ) -> None:
        self._make_inner = inner
        self._gate = gate
        self._ssl_context = ssl_context
        self._handshake_timeout_s = handshake_timeout_s
        self._handshakes = handshakes
        self._inner: asyncio.Protocol | None = None
        self._holds_slot = False
        # Bytes (and an EOF) the TLS layer delivers in the same read as the end of
        # the handshake, before ``start_tls`` has returned and aiohttp is attached.
        self._early: list[bytes] = []
        self._early_eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Take a slot (or abort at once), then start the TLS handshake."""
        raw = cast(asyncio.Transport, transport)
        if not self._gate.enter():
            raw.abort()
            return
        self._holds_slot = True
        raw.pause_reading()  # start_tls resumes reading once the TLS layer is in place
        task = asyncio.get_running_loop().create_task(self._secure(raw))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _secure(self, raw: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        try:
            secured = await loop.start_tls(
                raw,
                self,
                self._ssl_context,
                server_side=True,
                ssl_handshake_timeout=self._handshake_timeout_s,
            )
        except BaseException as exc:
            # Refused certificate, timeout, reset, or shutdown: the TLS layer never
            # reports this connection again, so the slot is returned here.
            raw.abort()
            self._release()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        if secured is None:  # the peer went away as the handshake finished
            self._release()
            return
        inner = self._inner = self._make_inner()
        inner.connection_made(secured)
        early, self._early = self._early, []
        for data in early:
            inner.data_received(data)
        if self._early_eof:
            inner.eof_received()  # the TLS layer is already shutting the connection down

    def _release(self) -> None:
        if self._holds_slot:
            self._holds_slot = False
            self._gate.leave()

    def data_received(self, data: bytes) -> None:
        """Forward decrypted request bytes (kept until aiohttp is attached)."""
        if self._inner is not None:
            self._inner.data_received(data)
        else:
            self._early.append(data)

    def eof_received(self) -> bool | None:
        """Forward the peer's end of stream (remembered until aiohttp is attached)."""
        if self._inner is not None:
            return self._inner.eof_received()
        self._early_eof = True
        return None

    def pause_writing(self) -> None:
        """Forward flow control."""
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        """Forward flow control."""
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        """Return the slot and tell aiohttp."""
        self._release()
        inner, self._inner = self._inner, None
        if inner is not None:
            inner.connection_lost(exc)


async def cancel_handshakes(handshakes: set[asyncio.Task[None]]) -> None:
    """Stop handshakes still in progress (at shutdown)."""
    for task in list(handshakes):
        task.cancel()
    for task in list(handshakes):
        with contextlib.suppress(asyncio.CancelledError):
            await task
