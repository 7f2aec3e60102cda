"""Admitting TCP connections to an HTTP listener: a cap from accept, classes, bounded TLS.

Every accepted connection first takes a slot from the `ConnectionGate`; past
the listener's cap it is aborted before a single byte is read, so neither
silent sockets nor stalled TLS handshakes can pile up beyond it. A TLS listener
then upgrades the connection within the header-read deadline, and a classifier
(when the listener has one) names the connection's class from the finished
handshake, e.g. a Local caller or a peer, each class with its own cap. Only
then does the HTTP protocol see the connection. The slot is returned when the
connection ends, however it ends.

TLS uses a smaller read buffer than asyncio's default (256 KiB per connection,
allocated at accept), because an idle connection would otherwise hold it for
as long as it stays open; `HeapTrim` hands freed heap back to the OS after
connection churn, since glibc keeps freed small blocks in the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import ssl
from asyncio import sslproto
from collections.abc import Callable, Mapping
from typing import cast

TLS_READ_BUFFER_BYTES = 16 * 1024
"""Bytes of ciphertext read from the socket at once on a TLS connection, and the
buffer each TLS connection keeps for it. One TLS record is at most 16 KiB, so a
larger buffer saves only system calls on big bodies, and every idle connection
pays for it (asyncio's default is 256 KiB)."""

HEAP_TRIM_DELAY_S = 1.0
"""Seconds after a connection closes before freed heap is handed back to the OS;
closes within that time share one trim, so churn costs one trim a second at most."""

Classifier = Callable[[asyncio.Transport], str]
"""Names the class of a connection (for example ``local`` or ``peer``) from its
transport after the TLS handshake (peer certificate, address)."""


class ConnectionGate:
    """Counts open connections against a total cap and, once classified, per-class caps."""

    def __init__(self, limit: int, class_limits: Mapping[str, int] | None = None) -> None:
        self.limit = limit
        self.class_limits = dict(class_limits or {})
        self.open = 0
        self.refused = 0
        self.by_class: dict[str, int] = dict.fromkeys(self.class_limits, 0)

    def enter(self) -> bool:
        """Take a slot for a new connection; False when the listener is full."""
        if self.open >= self.limit:
            self.refused += 1
            return False
        self.open += 1
        return True

    def leave(self) -> None:
        """Give a connection's slot back."""
        self.open -= 1

    def enter_class(self, name: str) -> bool:
        """Count a classified connection in its class; False when that class is full."""
        limit = self.class_limits.get(name, self.limit)
        if self.by_class.get(name, 0) >= limit:
            self.refused += 1
            return False
        self.by_class[name] = self.by_class.get(name, 0) + 1
        return True

    def leave_class(self, name: str) -> None:
        """Give a classified connection's class slot back."""
        self.by_class[name] -= 1


class HeapTrim:
    """Returns freed heap to the OS (glibc ``malloc_trim``) shortly after connections close."""

    def __init__(self, delay_s: float = HEAP_TRIM_DELAY_S) -> None:
        self._delay_s = delay_s
        self._pending: asyncio.TimerHandle | None = None
        name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(name) if name else None
        self._trim = getattr(libc, "malloc_trim", None)

    def connection_closed(self) -> None:
        """Schedule one trim (later closes join the scheduled one)."""
        if self._trim is None or self._pending is not None:
            return
        self._pending = asyncio.get_running_loop().call_later(self._delay_s, self._run)

    def _run(self) -> None:
        self._pending = None
        if self._trim is not None:
            self._trim(0)

    def cancel(self) -> None:
        """Drop a scheduled trim (at shutdown)."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None


class _CompactSSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol with a `TLS_READ_BUFFER_BYTES` read buffer."""

    max_size = TLS_READ_BUFFER_BYTES


async def start_compact_tls(
    raw: asyncio.Transport,
    protocol: asyncio.Protocol,
    context: ssl.SSLContext,
    handshake_timeout_s: float,
    shutdown_timeout_s: float,
) -> asyncio.Transport | None:
    """``loop.start_tls(server_side=True)`` with the compact read buffer.

    The steps are asyncio's own (``BaseEventLoop.start_tls``); only the protocol
    class differs. Returns the TLS transport once the handshake is done, or None
    when the peer went away as it finished.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    tls = _CompactSSLProtocol(
        loop,
        protocol,
        context,
        waiter,
        server_side=True,
        ssl_handshake_timeout=handshake_timeout_s,  # type: ignore[arg-type]  # a float works
        ssl_shutdown_timeout=shutdown_timeout_s,
        call_connection_made=False,
    )
    raw.pause_reading()
    raw.set_protocol(tls)
    made = loop.call_soon(tls.connection_made, raw)
    resumed = loop.call_soon(raw.resume_reading)
    try:
        await waiter
    except BaseException:
        raw.close()
        made.cancel()
        resumed.cancel()
        raise
    return cast(asyncio.Transport | None, tls._app_transport)


InnerFactory = Callable[[asyncio.Transport], asyncio.Protocol]
"""Makes the HTTP protocol of one admitted connection, given its raw TCP transport
(which a refusal closes directly, so no TLS shutdown keeps reading)."""


class GuardedConnection(asyncio.Protocol):
    """One accepted TCP connection: a slot, an optional bounded TLS handshake, then HTTP.

    This object is the TCP protocol until the handshake starts and then the
    application protocol of the TLS layer, forwarding every event to the inner
    (HTTP) protocol once the connection is admitted.
    """

    def __init__(
        self,
        inner: InnerFactory,
        gate: ConnectionGate,
        *,
        tls: ssl.SSLContext | None,
        handshake_timeout_s: float,
        handshakes: set[asyncio.Task[None]],
        classify: Classifier | None = None,
        trim: HeapTrim | None = None,
    ) -> None:
        self._make_inner = inner
        self._gate = gate
        self._tls = tls
        self._handshake_timeout_s = handshake_timeout_s
        self._handshakes = handshakes
        self._classify = classify
        self._trim = trim
        self._inner: asyncio.Protocol | None = None
        self._holds_slot = False
        self._class: str | None = None
        # Bytes (and an EOF) the TLS layer delivers in the same read as the end of
        # the handshake, before the handshake has returned and HTTP is attached.
        self._early: list[bytes] = []
        self._early_eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Take a slot (or abort at once), then admit the connection or start TLS."""
        raw = cast(asyncio.Transport, transport)
        if not self._gate.enter():
            raw.abort()
            return
        self._holds_slot = True
        if self._tls is None:
            self._attach(raw, raw)
            return
        raw.pause_reading()  # the TLS layer resumes reading once it is in place
        task = asyncio.get_running_loop().create_task(self._secure(raw))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _secure(self, raw: asyncio.Transport) -> None:
        assert self._tls is not None
        try:
            secured = await start_compact_tls(
                raw, self, self._tls, self._handshake_timeout_s, self._handshake_timeout_s
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
        self._attach(secured, raw)

    def _attach(self, transport: asyncio.Transport, raw: asyncio.Transport) -> None:
        if self._classify is not None:
            name = self._classify(transport)
            if not self._gate.enter_class(name):
                raw.abort()
                return
            self._class = name
        inner = self._inner = self._make_inner(raw)
        inner.connection_made(transport)
        early, self._early = self._early, []
        for data in early:
            inner.data_received(data)
        if self._early_eof:
            inner.eof_received()  # the TLS layer is already shutting the connection down

    def _release(self) -> None:
        if self._holds_slot:
            self._holds_slot = False
            self._gate.leave()
            if self._class is not None:
                self._gate.leave_class(self._class)
                self._class = None
            if self._trim is not None:
                self._trim.connection_closed()

    def data_received(self, data: bytes) -> None:
        """Forward request bytes (kept until HTTP is attached)."""
        if self._inner is not None:
            self._inner.data_received(data)
        else:
            self._early.append(data)

    def eof_received(self) -> bool | None:
        """Forward the peer's end of stream (remembered until HTTP is attached)."""
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
        """Return the slot and tell the HTTP protocol."""
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
