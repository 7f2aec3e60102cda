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
import functools
import gc
import ssl
import time
from asyncio import sslproto
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

TLS_READ_BUFFER_BYTES = 16 * 1024
"""Bytes of ciphertext read from the socket at once on a TLS connection, and the
buffer each TLS connection keeps for it. One TLS record is at most 16 KiB, so a
larger buffer saves only system calls on big bodies, and every idle connection
pays for it (asyncio's default is 256 KiB)."""

HEAP_TRIM_DELAY_S = 1.0
"""Seconds after a connection closes before freed heap is handed back to the OS;
closes within that time share one trim, so churn costs one trim a second at most."""

HANDSHAKE_FAILURES = (OSError, ssl.SSLError, TimeoutError, EOFError)
"""What a failed TLS handshake raises (a refused certificate, a timeout, a reset); any
other exception is a fault of the listener and propagates (interrupts included)."""

Classifier = Callable[[asyncio.Transport], str]
"""Names the class of a connection (for example ``local`` or ``peer``) from its
transport after the TLS handshake (peer certificate, address)."""


class ConnectionGate:
    """Counts open connections against a total cap and, once classified, per-class caps.

    With ``evict_unsettled`` a full gate makes room for a new connection by
    aborting the oldest one that has not yet sent a complete request head
    (handshaking, silent or slow) and older than ``evictable_after_s``, instead
    of refusing the newcomer: a flood of
    slow connections then cannot lock out a health probe, which completes its
    head within milliseconds and is no longer evictable.
    """

    def __init__(
        self,
        limit: int,
        class_limits: Mapping[str, int] | None = None,
        *,
        evict_unsettled: bool = False,
        evictable_after_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.class_limits = dict(class_limits or {})
        self.evict_unsettled = evict_unsettled
        self.evictable_after_s = evictable_after_s
        self._clock = clock
        self.open = 0
        self.refused = 0
        self.evicted = 0
        self.by_class: dict[str, int] = dict.fromkeys(self.class_limits, 0)
        # Connections without a complete first head, oldest first, with accept times.
        self._unsettled: dict[asyncio.BaseTransport, float] = {}

    def enter(self, transport: asyncio.BaseTransport | None = None) -> bool:
        """Take a slot for a new connection; False when the listener is full.

        A ``transport`` counts as unsettled (evictable) until `settle` is called.
        """
        if self.open >= self.limit and not self._evict_oldest():
            self.refused += 1
            return False
        self.open += 1
        if transport is not None:
            self._unsettled[transport] = self._clock()
        return True

    def settle(self, transport: asyncio.BaseTransport) -> None:
        """The connection sent a complete request head: it is no longer evictable."""
        self._unsettled.pop(transport, None)

    def _evict_oldest(self) -> bool:
        if not self.evict_unsettled or not self._unsettled:
            return False
        oldest, accepted_at = next(iter(self._unsettled.items()))
        if self._clock() - accepted_at < self.evictable_after_s:
            return False
        del self._unsettled[oldest]
        self.evicted += 1
        # Its slot is given back when the abort is reported (connection_lost);
        # until then the gate holds one connection over its cap.
        cast(asyncio.Transport, oldest).abort()
        return True

    def leave(self, transport: asyncio.BaseTransport | None = None) -> None:
        """Give a connection's slot back."""
        self.open -= 1
        if transport is not None:
            self._unsettled.pop(transport, None)

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
        # A closed connection's aiohttp objects form reference cycles; collecting
        # them first is what lets their memory be handed back.
        gc.collect()
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
    first_bytes: bytes = b"",
) -> asyncio.Transport | None:
    """``loop.start_tls(server_side=True)`` with the compact read buffer.

    The steps are asyncio's own (``BaseEventLoop.start_tls``); only the protocol
    class differs, and ``first_bytes`` (ciphertext already read from ``raw``) are
    fed to the TLS layer first. Returns the TLS transport once the handshake is
    done, or None when the peer went away as it finished.
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
    fed = loop.call_soon(_feed, tls, first_bytes)
    resumed = loop.call_soon(raw.resume_reading)
    try:
        await waiter
    except BaseException:
        raw.close()
        made.cancel()
        fed.cancel()
        resumed.cancel()
        raise
    return cast(asyncio.Transport | None, tls._app_transport)


def _feed(tls: sslproto.SSLProtocol, data: bytes) -> None:
    """Hand already-read ciphertext to the TLS layer as if it had just been received."""
    view = memoryview(data)
    while view:
        buffer = tls.get_buffer(len(view))
        size = min(len(buffer), len(view))
        buffer[:size] = view[:size]
        tls.buffer_updated(size)
        view = view[size:]


@dataclass(frozen=True)
class Admitted:
    """What the HTTP protocol of an admitted connection is given."""

    raw: asyncio.Transport
    """The TCP transport, which a refusal closes directly (no TLS shutdown keeps reading)."""
    settled: Callable[[], None]
    """To call once the first request head is complete (then it is no longer evictable)."""
    first_head_due: float
    """Loop time by which the first request head must be complete (accept + deadline)."""


InnerFactory = Callable[[Admitted], asyncio.Protocol]
"""Makes the HTTP protocol of one admitted connection."""


class ForwardingProtocol(asyncio.Protocol):
    """A protocol that hands every event to an inner protocol attached later.

    Bytes (and an EOF) that arrive before the inner protocol is attached, such as
    those the TLS layer delivers in the same read as the end of the handshake, are
    kept and replayed to it on `_hand_over`. Flow control is forwarded as is.
    """

    def __init__(self) -> None:
        self._inner: asyncio.Protocol | None = None
        self._early: list[bytes] = []
        self._early_eof = False

    def _hand_over(self, inner: asyncio.Protocol, transport: asyncio.BaseTransport) -> None:
        """Attach ``inner`` to ``transport`` and replay what arrived before it."""
        self._inner = inner
        inner.connection_made(transport)
        early, self._early = self._early, []
        for data in early:
            inner.data_received(data)
        if self._early_eof:
            inner.eof_received()  # the TLS layer is already shutting the connection down

    def _forward(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)
        else:
            self._early.append(data)

    def data_received(self, data: bytes) -> None:
        """Forward bytes (kept until the inner protocol is attached)."""
        self._forward(data)

    def eof_received(self) -> bool | None:
        """Forward the peer's end of stream (remembered until the inner protocol is attached)."""
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


class GuardedConnection(ForwardingProtocol):
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
        first_head_timeout_s: float,
        handshakes: set[asyncio.Task[None]],
        classify: Classifier | None = None,
        trim: HeapTrim | None = None,
    ) -> None:
        super().__init__()
        self._make_inner = inner
        self._gate = gate
        self._tls = tls
        self._first_head_timeout_s = first_head_timeout_s
        self._first_head_due = 0.0
        self._handshakes = handshakes
        self._classify = classify
        self._trim = trim
        self._holds_slot = False
        self._slot: asyncio.Transport | None = None
        self._class: str | None = None
        self._raw: asyncio.Transport | None = None  # a TLS connection before its first byte
        self._silence: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Take a slot (or abort at once), then admit the connection or start TLS."""
        raw = cast(asyncio.Transport, transport)
        if not self._gate.enter(raw):
            raw.abort()
            return
        self._holds_slot = True
        self._slot = raw
        loop = asyncio.get_running_loop()
        self._first_head_due = loop.time() + self._first_head_timeout_s
        if self._tls is None:
            self._attach(raw, raw)
            return
        # The TLS layer (buffers, handshake task) is built only once the client
        # speaks, so a silent socket costs little more than its descriptor. Silence
        # and the handshake together must end by the first head's deadline.
        self._raw = raw
        self._silence = loop.call_at(self._first_head_due, raw.abort)

    def _begin_tls(self, raw: asyncio.Transport, first_bytes: bytes) -> None:
        raw.pause_reading()  # the TLS layer resumes reading once it is in place
        task = asyncio.get_running_loop().create_task(self._secure(raw, first_bytes))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _secure(self, raw: asyncio.Transport, first_bytes: bytes) -> None:
        assert self._tls is not None
        timeout_s = self._first_head_timeout_s
        try:
            secured = await start_compact_tls(
                raw, self, self._tls, timeout_s, timeout_s, first_bytes
            )
        except HANDSHAKE_FAILURES:
            # Refused certificate, timeout or reset: the TLS layer never reports
            # this connection again, so the slot is returned here.
            raw.abort()
            self._release()
            return
        except asyncio.CancelledError:  # shutdown: give the slot back, then stop
            raw.abort()
            self._release()
            raise
        if secured is None:  # the peer went away as the handshake finished
            self._release()
            return
        self._attach(secured, raw)

    def _attach(self, transport: asyncio.Transport, raw: asyncio.Transport) -> None:
        if self._silence is not None:
            self._silence.cancel()
            self._silence = None
        if self._classify is not None:
            name = self._classify(transport)
            if not self._gate.enter_class(name):
                raw.abort()
                return
            self._class = name
        settled = functools.partial(self._gate.settle, raw)
        self._hand_over(self._make_inner(Admitted(raw, settled, self._first_head_due)), transport)

    def _release(self) -> None:
        if self._holds_slot:
            self._holds_slot = False
            self._gate.leave(self._slot)
            self._slot = None
            if self._class is not None:
                self._gate.leave_class(self._class)
                self._class = None
            if self._trim is not None:
                self._trim.connection_closed()

    def data_received(self, data: bytes) -> None:
        """Start TLS on the first ciphertext; then forward bytes (kept until HTTP is attached)."""
        if self._raw is not None:
            raw, self._raw = self._raw, None
            self._begin_tls(raw, data)
        else:
            self._forward(data)

    def connection_lost(self, exc: Exception | None) -> None:
        """Return the slot and tell the HTTP protocol."""
        if self._silence is not None:
            self._silence.cancel()
            self._silence = None
        self._raw = None
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
