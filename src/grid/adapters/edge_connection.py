"""The one path of every accepted connection: a slot, a bounded TLS handshake, a class, HTTP.

Every Grid HTTP listener (`grid.adapters.http_listener` and the signals listener)
accepts each TCP connection as one `EdgeConnection`, whose ledger is the pure
`grid.core.edge.connections.ConnectionBook` of its `Edge`:

1. **accept**: the book holds it as pending, or refuses it; a refused socket is
   aborted before a byte is read, and connections the book evicts for it are
   aborted too;
2. **handshake** (TLS listeners): the TLS layer is built only once the client
   speaks, so a silent socket costs little more than its descriptor; silence and
   the handshake together must end by the first head's deadline;
3. **classify**: the edge's classifier names the connection's class from the
   finished handshake (Local or peer, from the certificate), or refuses it
   (an unknown certificate gets the edge's unauthorized answer, then a close);
   the book then admits it into its class or refuses it;
4. **serve**: the HTTP protocol made for the admitted connection gets every
   event; the first complete head settles it in the book.

The connection leaves the book when it ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from grid.adapters.runtime_internals import HeapTrim, start_compact_tls
from grid.core.edge.connections import ConnectionBook, Refusal

HANDSHAKE_FAILURES = (OSError, ssl.SSLError, TimeoutError, EOFError)
"""What a failed TLS handshake raises (a refused certificate, a timeout, a reset); any
other exception is a fault of the listener and propagates (interrupts included)."""

UNCLASSIFIED = ""
"""The class of every connection on an edge without a classifier."""

Classifier = Callable[[asyncio.Transport], str | None]
"""Names the class of a connection (for example ``local`` or ``peer``) from its
transport after the TLS handshake (peer certificate, address); None refuses it."""


@dataclass(frozen=True)
class Admitted:
    """What the HTTP protocol of an admitted connection is given."""

    raw: asyncio.Transport
    """The TCP transport, which a refusal closes directly (no TLS shutdown keeps reading)."""
    settled: Callable[[], None]
    """To call once the first request head is complete (then it is no longer evictable)."""
    first_head_due: float
    """Loop time by which the first request head must be complete (accept + deadline)."""
    left: Callable[[], None]
    """To call from the protocol's ``connection_lost``: the transport is handed to it
    directly, so the edge hears of the end only through this (the slot is returned)."""


InnerFactory = Callable[[Admitted], asyncio.Protocol]
"""Makes the HTTP protocol of one admitted connection; it becomes the transport's
protocol and must call ``Admitted.left`` when the connection is lost."""


def _ignore(_value: object) -> None:
    """The default observer."""


@dataclass
class Edge:
    """What every connection of one listener shares."""

    book: ConnectionBook
    first_head_timeout_s: float
    """Seconds from accept to a complete first request head, TLS handshake included."""
    tls: ssl.SSLContext | None = None
    handshake_timeout_s: float | None = None
    """Seconds the TLS handshake itself may take (None: the first head's deadline)."""
    classify: Classifier | None = None
    unauthorized_answer: bytes = b""
    """Written to a connection the classifier refuses before it is closed (empty: aborted)."""
    on_refused: Callable[[Refusal | None], None] = _ignore
    """Called with each refusal and eviction, or None for a failed handshake."""
    on_classified: Callable[[str], None] = _ignore
    trim: HeapTrim | None = None
    classes: dict[asyncio.BaseTransport, str] = field(default_factory=dict)
    """The class of each served connection's transport, for the request handlers."""
    handshakes: set[asyncio.Task[None]] = field(default_factory=set)


class ForwardingProtocol(asyncio.Protocol):
    """A protocol that hands its transport to an inner protocol attached later.

    Bytes (and an EOF) that arrive before the inner protocol is attached, such as
    those the TLS layer delivers in the same read as the end of the handshake, are
    kept and replayed to it on `_hand_over`. From then on the transport delivers
    every event (bytes, flow control, the end) to the inner protocol itself, so no
    request pays for a forwarding hop.
    """

    def __init__(self) -> None:
        self._inner: asyncio.Protocol | None = None
        self._early: list[bytes] = []
        self._early_eof = False

    def _hand_over(self, inner: asyncio.Protocol, transport: asyncio.BaseTransport) -> None:
        """Make ``inner`` the protocol of ``transport`` and replay what arrived before it."""
        self._inner = inner
        transport.set_protocol(inner)
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


class EdgeConnection(ForwardingProtocol):
    """One accepted TCP connection on its way through the edge, then its HTTP protocol.

    This object is the TCP protocol until the handshake starts and then the
    application protocol of the TLS layer; once the connection is admitted the
    transport is handed to the inner (HTTP) protocol, which reports the end through
    ``Admitted.left``. It is its own key in the book.
    """

    def __init__(self, edge: Edge, inner: InnerFactory) -> None:
        super().__init__()
        self._edge = edge
        self._make_inner = inner
        self._held = False
        self._tcp: asyncio.Transport | None = None
        self._first_head_due = 0.0
        self._raw: asyncio.Transport | None = None  # a TLS connection before its first byte
        self._silence: asyncio.TimerHandle | None = None
        self._served: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Take a slot (or abort at once), then admit the connection or wait to start TLS."""
        raw = cast(asyncio.Transport, transport)
        edge, loop = self._edge, asyncio.get_running_loop()
        peer = raw.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        now = loop.time()
        refused = edge.book.accept(self, source, now)
        for victim in edge.book.take_evicted():
            edge.on_refused(Refusal.EVICTED)
            cast(EdgeConnection, victim).evict()
        if refused is not None:
            edge.on_refused(refused)
            raw.abort()
            return
        self._held = True
        self._tcp = raw
        self._first_head_due = now + edge.first_head_timeout_s
        if edge.tls is None:
            self._admit(raw, raw)
            return
        self._raw = raw
        self._silence = loop.call_at(self._first_head_due, raw.abort)

    def evict(self) -> None:
        """Close a connection the book has evicted (and already forgotten)."""
        self._held = False
        if self._tcp is not None:
            self._tcp.abort()

    def data_received(self, data: bytes) -> None:
        """Start TLS on the first ciphertext; then forward bytes (kept until HTTP is attached)."""
        if self._raw is not None:
            raw, self._raw = self._raw, None
            raw.pause_reading()  # the TLS layer resumes reading once it is in place
            task = asyncio.get_running_loop().create_task(self._secure(raw, data))
            self._edge.handshakes.add(task)
            task.add_done_callback(self._edge.handshakes.discard)
        else:
            self._forward(data)

    async def _secure(self, raw: asyncio.Transport, first_bytes: bytes) -> None:
        edge = self._edge
        assert edge.tls is not None
        loop = asyncio.get_running_loop()
        remaining_s = max(0.001, self._first_head_due - loop.time())
        timeout_s = min(remaining_s, edge.handshake_timeout_s or remaining_s)
        try:
            secured = await start_compact_tls(
                raw, self, edge.tls, timeout_s, edge.first_head_timeout_s, first_bytes
            )
        except HANDSHAKE_FAILURES:
            # Refused certificate, timeout or reset: the TLS layer never reports
            # this connection again, so the slot is returned here.
            raw.abort()
            self._leave(handshake_failed=True)
            return
        except asyncio.CancelledError:  # shutdown: give the slot back, then stop
            raw.abort()
            self._leave()
            raise
        if secured is None:  # the peer went away as the handshake finished
            self._leave(handshake_failed=True)
            return
        self._admit(secured, raw)

    def _admit(self, transport: asyncio.Transport, raw: asyncio.Transport) -> None:
        edge = self._edge
        if self._silence is not None:
            self._silence.cancel()
            self._silence = None
        if not self._held:  # evicted as its handshake finished
            transport.abort()
            return
        name = edge.classify(transport) if edge.classify is not None else UNCLASSIFIED
        verdict = edge.book.classify(self, name)
        if isinstance(verdict, Refusal):
            self._held = False
            edge.on_refused(verdict)
            if verdict is Refusal.UNAUTHORIZED and edge.unauthorized_answer:
                transport.write(edge.unauthorized_answer)
                transport.close()
            else:
                raw.abort()
            return
        self._served = transport
        edge.classes[transport] = verdict
        edge.on_classified(verdict)
        settled = functools.partial(edge.book.settle, self)
        admitted = Admitted(raw, settled, self._first_head_due, self._leave)
        self._hand_over(self._make_inner(admitted), transport)

    def _leave(self, *, handshake_failed: bool = False) -> None:
        if not self._held:
            return
        self._held = False
        edge = self._edge
        edge.book.release(self)
        if handshake_failed:
            edge.on_refused(None)
        if self._served is not None:
            edge.classes.pop(self._served, None)
            self._served = None
        if edge.trim is not None:
            edge.trim.connection_closed()

    def connection_lost(self, exc: Exception | None) -> None:
        """Leave the book (a connection lost before its hand-over, or a protocol that
        does not report through ``Admitted.left``) and tell the HTTP protocol."""
        if self._silence is not None:
            self._silence.cancel()
            self._silence = None
        self._raw = None
        self._leave()
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
