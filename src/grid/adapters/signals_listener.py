"""The signals listener's connections: accept, bounded mTLS handshake, classify, serve.

Each TCP connection the listener accepts is one `ClassifiedConnection`. It asks
the `grid.core.signals.connections.ConnectionBook` for a slot before reading a byte (past
the total cap the socket is aborted at once), upgrades the socket to TLS within
the handshake deadline, and then classifies the verified leaf certificate with
the declared `grid.core.trust.TrustPolicy`:

* Local or an authorized peer within the peer cap: the connection is handed to
  aiohttp's request handler, and its class is remembered for the handlers
  (the ingest route, for one, serves Local only);
* a peer past the peer cap: closed at once;
* neither Local nor a peer: answered with 403 ``{code: "unauthorized"}`` and
  closed, without reading the request.

Once classified, the connection is served by the shared listener policy's
request handler (`grid.adapters.http_listener.PolicedRequestHandler`): header
and idle deadlines, refusals closed unread, errors logged by class and reason
only. Its slot is returned when it ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from grid.adapters.connection_gate import HANDSHAKE_FAILURES, ForwardingProtocol
from grid.core.signals.connections import ConnectionBook, ConnectionClass, Refusal
from grid.core.trust import PeerClass, TrustPolicy


def refusal_bytes(status: int, reason: str, code: str, message: str) -> bytes:
    """A complete ``Connection: close`` HTTP/1.1 response with a JSON ``{code, message}``."""
    body = json.dumps({"code": code, "message": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


UNAUTHORIZED_RESPONSE = refusal_bytes(
    403,
    "Forbidden",
    "unauthorized",
    "the client certificate is neither this site's own nor an authorized peer's",
)


@dataclass
class ListenerState:
    """What every connection of one listener shares: the book, trust, and observers."""

    book: ConnectionBook
    ssl_context: ssl.SSLContext
    trust: Callable[[], TrustPolicy]
    on_refused: Callable[[Refusal | None], None]
    """Called with the refusal, or None for a failed handshake."""
    on_classified: Callable[[ConnectionClass], None]
    classes: dict[asyncio.BaseTransport, ConnectionClass] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class ClassifiedConnection(ForwardingProtocol):
    """One accepted connection: a slot, a bounded handshake, a class, then aiohttp.

    This object is the TCP protocol until the handshake starts, and then the
    application protocol of the TLS layer, forwarding every event to aiohttp's
    handler once the connection is classified.
    """

    def __init__(
        self, state: ListenerState, inner: Callable[[asyncio.Transport, float], asyncio.Protocol]
    ) -> None:
        super().__init__()
        self._state = state
        self._make_inner = inner
        self._raw: asyncio.Transport | None = None
        self._accepted_at = 0.0
        self._secured: asyncio.Transport | None = None
        self._class: ConnectionClass | None = None
        self._pending = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Take a slot (or abort at once), then start the TLS handshake."""
        raw = cast(asyncio.Transport, transport)
        peer = raw.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        now = asyncio.get_running_loop().time()
        book = self._state.book
        refused = book.accept(self, source, now)
        for victim in book.take_evicted():
            self._state.on_refused(Refusal.EVICTED)
            cast(ClassifiedConnection, victim).evict()
        if refused is not None:
            self._state.on_refused(refused)
            raw.abort()
            return
        self._pending = True
        self._raw = raw
        self._accepted_at = now
        raw.pause_reading()  # start_tls resumes reading once the TLS layer is in place
        task = asyncio.get_running_loop().create_task(self._secure(raw))
        self._state.tasks.add(task)
        task.add_done_callback(self._state.tasks.discard)

    async def _secure(self, raw: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        try:
            secured = await loop.start_tls(
                raw,
                self,
                self._state.ssl_context,
                server_side=True,
                ssl_handshake_timeout=self._state.book.limits.handshake_timeout_s,
            )
        except HANDSHAKE_FAILURES:
            # A missing or unverifiable certificate, a timeout or a reset.
            raw.abort()
            self._abandon()
            return
        except asyncio.CancelledError:  # shutdown: give the slot back, then stop
            raw.abort()
            self._abandon()
            raise
        if secured is None:  # the peer went away as the handshake finished
            self._abandon()
            return
        self._classify(secured)

    def evict(self) -> None:
        """Close a connection still handshaking; the book has already forgotten it."""
        self._pending = False
        if self._raw is not None:
            self._raw.abort()

    def _abandon(self) -> None:
        if self._pending:
            self._pending = False
            self._state.book.abandon(self)
            self._state.on_refused(None)

    def _classify(self, secured: asyncio.Transport) -> None:
        ssl_object = secured.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        peer_class = self._state.trust().classify(der) if der else PeerClass.UNKNOWN
        if not self._pending:  # evicted as its handshake finished
            secured.abort()
            return
        self._pending = False
        verdict = self._state.book.classify(peer_class, self)
        if isinstance(verdict, Refusal):
            self._state.on_refused(verdict)
            if verdict is Refusal.UNAUTHORIZED:
                secured.write(UNAUTHORIZED_RESPONSE)
                secured.close()
            else:
                secured.abort()
            return
        self._class = verdict
        self._secured = secured
        self._state.classes[secured] = verdict
        self._state.on_classified(verdict)
        assert self._raw is not None
        self._hand_over(self._make_inner(self._raw, self._accepted_at), secured)

    def connection_lost(self, exc: Exception | None) -> None:
        """Return the slot and tell aiohttp."""
        if self._class is not None:
            self._state.book.release(self._class)
            self._class = None
        if self._secured is not None:
            self._state.classes.pop(self._secured, None)
        self._abandon()
        inner, self._inner = self._inner, None
        if inner is not None:
            inner.connection_lost(exc)


async def cancel_tasks(tasks: set[asyncio.Task[None]]) -> None:
    """Stop handshakes still in progress (at shutdown)."""
    for task in list(tasks):
        task.cancel()
    for task in list(tasks):
        with contextlib.suppress(asyncio.CancelledError):
            await task
