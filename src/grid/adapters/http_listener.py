"""The one listener policy of every Grid HTTP server, and the listener that applies it.

Every aiohttp server of Grid (the operator's metrics and health endpoint, the
telemetry gateway, the mock provider, and the signals listener and reference
gateway) is served by `HttpListener` under a `ListenerPolicy`:

- a **header-read deadline**: a new connection's first request head (TLS
  handshake included) must be complete within ``header_read_timeout_s`` of
  accept, and every later head within that time of its first byte;
- an **idle timeout**: a kept-alive connection that sends no byte of a next
  request within ``idle_timeout_s`` of the previous answer is closed;
- a **connection cap**: at most ``connections_max`` connections, counted from
  TCP accept in the listener's `grid.core.edge.connections.ConnectionBook` (the
  accept, handshake and classify path is `grid.adapters.edge_connection`),
  optionally split into classes by a classifier hook (e.g. Local callers and
  peers) with a cap each.

A connection that misses a deadline is closed at once. So is a connection
whose request was answered while its body was left unread (a refusal): the TCP
socket is closed with no TLS shutdown, after at most a bounded lingering read
(``refused_linger_*``: the answer, a FIN, then a bounded read-and-drop, so a
client still sending reads its refusal instead of a reset). aiohttp's own
lingering close is disabled.

Errors are logged on ``grid.http`` as one record holding the error class and a
stable reason (``malformed_request``, ``header_timeout`` ...), never a
traceback, an exception message or a header value: aiohttp's access log is off
and its error path is replaced here, so nothing a client sent reaches the logs.
A malformed request is answered by the listener's ``error_answer`` (the
telemetry gateway answers a Refusal; the default is a short text).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import http_exceptions, web
from aiohttp.web_protocol import RequestHandler

from grid.adapters.edge_connection import (
    Admitted,
    Classifier,
    Edge,
    EdgeConnection,
    cancel_handshakes,
)
from grid.adapters.runtime_internals import HeapTrim, awaiting_head, heads_parsed
from grid.core.edge.connections import BookCaps, ConnectionBook, Eviction

log = logging.getLogger("grid.http")

SHUTDOWN_TIMEOUT_S = 5.0
"""Seconds in-flight requests get to finish when a listener stops."""

ACCEPT_BACKLOG = 256
"""Connections the kernel may queue before the listener accepts them (asyncio also
accepts up to this many in one go). A short queue makes a burst of connects wait for
SYN retransmits (a second each); a long one lets one burst of accepts hold that many
descriptors at once before the cap closes them."""

ErrorAnswer = Callable[[int, str], web.StreamResponse]
"""Builds the answer to a request the listener refuses itself: (HTTP status, reason)."""


@dataclass(frozen=True)
class ListenerPolicy:
    """Deadlines and caps of one HTTP listener."""

    header_read_timeout_s: float = 5.0
    """Seconds a request head may take: a new connection's first head (TLS handshake
    included) from accept, a later head from its first byte. Longer tolerates slower
    clients; every second is a second a slow client holds a connection slot."""
    idle_timeout_s: float = 30.0
    """Seconds a kept-alive connection may stay silent after an answer before it is
    closed. Longer saves clients reconnecting (and TLS handshakes); shorter frees
    slots and memory sooner."""
    connections_max: int = 256
    """Most open connections, counted from TCP accept (handshaking ones included);
    one more is aborted before any byte is read. Bounds file descriptors and memory."""
    class_limits: Mapping[str, int] = field(default_factory=dict)
    """Most connections of each class named by ``classify``; a class not listed is
    bounded by ``connections_max`` alone."""
    classify: Classifier | None = None
    """Names a connection's class once admitted (after the TLS handshake), e.g. from
    its peer certificate; None leaves connections unclassified."""
    evict_unsettled: bool = False
    """When full, abort the oldest connection that has not sent a complete request
    head (and is older than ``evictable_after_s``) to admit a new one, instead of
    refusing the newcomer. Keeps a listener reachable for clients that send their
    head at once (probes, scrapers) during a flood of slow connections."""
    evictable_after_s: float = 0.5
    """Seconds a connection without a complete head is safe from eviction: time for
    an honest client's handshake and head, so a burst of newcomers cannot evict each
    other (or a probe) before their first bytes are read."""
    refused_body_discard_bytes_max: int = 64 * 1024
    """Largest declared body that is read and dropped after an answer that left it
    unread (a refusal), so the client keeps its connection; within the header-read
    deadline. A larger, chunked or held-back (``Expect: 100-continue``) body closes
    the connection unread. A bigger value saves reconnects at the cost of reading
    bytes nobody wants."""

    refused_linger_bytes_max: int = 0
    """After an answer that left a larger body unread: the most of it read and dropped,
    once the answer is out and the write side is shut (FIN), before the socket is
    closed. A client that keeps sending while it reads then sees the answer and its
    end instead of a reset that would discard them. 0 closes at once (the client
    may see only the reset); a bigger value costs reading bytes nobody wants."""
    refused_linger_s: float = 0.0
    """How long that read-and-drop may last at the most."""

    def __post_init__(self) -> None:
        if self.header_read_timeout_s <= 0 or self.idle_timeout_s <= 0:
            raise ValueError("listener timeouts must be positive")
        if self.connections_max < 1:
            raise ValueError("a listener needs at least one connection slot")

    def caps(self) -> BookCaps:
        """The caps of this policy's connection book: one cap for every connection,
        handshaking ones included, a cap per class, and the eviction rule."""
        return BookCaps(
            connections_max=self.connections_max,
            class_caps=dict(self.class_limits),
            eviction=Eviction.OLDEST_UNSETTLED if self.evict_unsettled else Eviction.NONE,
            evictable_after_s=self.evictable_after_s,
        )


def plain_error(status: int, reason: str) -> web.StreamResponse:
    """The default answer to a refused request: the status and the stable reason."""
    return web.Response(status=status, text=f"{reason}\n")


def error_reason(status: int, exc: BaseException | None) -> str:
    """A stable reason for an error aiohttp reports (never the exception's text)."""
    if isinstance(exc, http_exceptions.LineTooLong):
        return "header_too_long"
    if isinstance(exc, http_exceptions.BadHttpMethod):
        return "bad_method"
    if isinstance(exc, http_exceptions.InvalidHeader):
        return "invalid_header"
    if isinstance(exc, http_exceptions.HttpProcessingError) or status == 400:
        return "malformed_request"
    if status == 504:
        return "handler_timeout"
    return "handler_error"


class PolicedRequestHandler(RequestHandler):
    """aiohttp's connection handler with the policy's deadlines, quiet errors, hard refusals."""

    def __init__(
        self,
        manager: web.Server,
        admitted: Admitted,
        policy: ListenerPolicy,
        error_answer: ErrorAnswer,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            manager,
            loop=asyncio.get_running_loop(),
            # aiohttp's own timer is only a backstop behind the deadlines below.
            keepalive_timeout=policy.idle_timeout_s + policy.header_read_timeout_s,
            lingering_time=0,
            logger=log,
            access_log=None,  # type: ignore[arg-type]  # None turns the access log off
            **kwargs,
        )
        self._clock = asyncio.get_running_loop()
        self._raw = admitted.raw
        self._settled: Callable[[], None] | None = admitted.settled
        self._first_head_due = admitted.first_head_due
        self._left = admitted.left
        self._policy = policy
        self._error_answer = error_answer
        self._deadline: asyncio.TimerHandle | None = None
        self._due: float | None = None
        """Loop time of the current deadline (None: none)."""
        self._deadline_reason = "header_timeout"
        self._idle = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start serving, with the first head due by the deadline counted from accept."""
        super().connection_made(transport)
        self._arm(max(0.0, self._first_head_due - self._clock.time()), "header_timeout")

    def data_received(self, data: bytes) -> None:
        """Parse bytes; the first byte after an answer starts the next head's deadline."""
        if data and self._idle:
            self._idle = False
            self._arm(self._policy.header_read_timeout_s, "header_timeout")
        heads = heads_parsed(self)
        super().data_received(data)
        if heads_parsed(self) != heads:  # a complete head (or a malformed one) arrived
            self._disarm()
            if self._settled is not None:
                self._settled()
                self._settled = None

    def connection_lost(self, exc: BaseException | None) -> None:
        """Stop the deadline, give the edge its slot back and let aiohttp clean up."""
        self._stop()
        self._left()
        super().connection_lost(exc)

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        """Send the answer, then close at once if the body was left unread or the answer
        closes the connection; otherwise wait for the next request, idle-bounded."""
        result = await super().finish_response(request, resp, start_time)
        unread = not request.content.is_eof()
        if unread and resp.keep_alive and self._discardable(request):
            unread = not await self._discard(request)
        if unread and self._policy.refused_linger_bytes_max > 0:
            await self._linger(request)
        if unread or not resp.keep_alive:
            self.refuse_connection()
        elif resp.keep_alive:
            self._idle = True
            self._arm(self._policy.idle_timeout_s, "idle_timeout")
        return result

    def _discardable(self, request: web.BaseRequest) -> bool:
        length = request.content_length
        held_back = request.headers.get("Expect", "").lower() == "100-continue"
        limit = self._policy.refused_body_discard_bytes_max
        return length is not None and length <= limit and not held_back

    async def _discard(self, request: web.BaseRequest) -> bool:
        """Read and drop a small unread body; True when it ended in time."""
        try:
            async with asyncio.timeout(self._policy.header_read_timeout_s):
                while await request.content.readany():
                    pass
        except Exception:  # late, reset or malformed: the connection is closed instead
            return False
        return request.content.is_eof()

    async def _linger(self, request: web.BaseRequest) -> None:
        """FIN after the answer, then read and drop within the policy's bounds."""
        transport = self.transport
        if transport is not None and transport.can_write_eof():
            transport.write_eof()  # sent once the answer is flushed; TLS cannot half-close
        dropped, limit = 0, self._policy.refused_linger_bytes_max
        try:
            async with asyncio.timeout(self._policy.refused_linger_s):
                while dropped < limit and (chunk := await request.content.readany()):
                    dropped += len(chunk)
        except Exception:  # late, reset or malformed: closed as it is
            return

    def refuse_connection(self) -> None:
        """Close the TCP socket now: no further read, no lingering, no TLS shutdown."""
        self._stop()
        self._raw.close()  # stops reading at once; what was written is still sent
        self.force_close()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """Answer a malformed request or a failed handler; log class and reason only."""
        if isinstance(exc, ConnectionError) or self.transport is None:
            # The client went away mid-request: nothing to answer, nothing to report.
            log.debug("client left mid-request", extra={"reason": "client_reset"})
            raise ConnectionError("the client left")
        reason = error_reason(status, exc)
        log.warning(
            "request refused",
            extra={"reason": reason, "status": status, "error": _class_of(exc)},
        )
        if request.writer.output_size > 0:
            raise ConnectionError("the answer had already started")
        answer = self._error_answer(status, reason)
        answer.force_close()
        return answer

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """aiohttp's other error reports: the error class, without its text or traceback."""
        exc_info = kw.get("exc_info")
        error = _class_of(exc_info if isinstance(exc_info, BaseException) else None)
        log.error("http connection failed", extra={"reason": "handler_error", "error": error})

    def _arm(self, delay_s: float, reason: str) -> None:
        """Set the deadline ``delay_s`` from now. A timer already due no later is kept
        and re-armed for the rest when it fires, so a busy kept-alive connection does
        not make and cancel two timers per request."""
        due = self._clock.time() + delay_s
        self._due = due
        self._deadline_reason = reason
        timer = self._deadline
        if timer is not None:
            if timer.when() <= due:
                return
            timer.cancel()
        self._deadline = self._clock.call_at(due, self._expire)

    def _disarm(self) -> None:
        """No deadline (a pending timer finds none when it fires)."""
        self._due = None

    def _stop(self) -> None:
        """No deadline and no timer (the connection is closing)."""
        self._due = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        due = self._due
        if due is None:
            return
        if due > self._clock.time():  # moved later since this timer was set
            self._deadline = self._clock.call_at(due, self._expire)
            return
        self._due = None
        if awaiting_head(self):  # still waiting for a request head
            log.debug("connection closed", extra={"reason": self._deadline_reason})
            self.refuse_connection()


def _class_of(exc: BaseException | None) -> str | None:
    return type(exc).__name__ if exc is not None else None


class HttpListener:
    """Serves one aiohttp application on ``host:port`` under a `ListenerPolicy`."""

    def __init__(
        self,
        app: web.Application,
        policy: ListenerPolicy | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        error_answer: ErrorAnswer = plain_error,
        auto_decompress: bool = True,
        shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
        reuse_port: bool = False,
    ) -> None:
        """``reuse_port`` binds with ``SO_REUSEPORT``, so processes of one user can
        listen on the same port and the kernel spreads new connections among them."""
        self.app = app
        self.policy = policy or ListenerPolicy()
        self.ssl_context = ssl_context
        self.connections = ConnectionBook(self.policy.caps())
        self._error_answer = error_answer
        self._auto_decompress = auto_decompress
        self._shutdown_timeout_s = shutdown_timeout_s
        """Seconds in-flight requests get at `stop` (the gateway's drain time)."""
        self._reuse_port = reuse_port
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._edge = Edge(
            self.connections,
            self.policy.header_read_timeout_s,
            tls=ssl_context,
            classify=self.policy.classify,
            trim=HeapTrim(),
        )

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on ``host:port`` (port 0 picks a free one); returns the bound address.

        A bind failure (``OSError``) cleans up before it propagates.
        """
        runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=self._shutdown_timeout_s)
        await runner.setup()
        server = runner.server
        assert server is not None
        policy = self.policy

        def inner(admitted: Admitted) -> asyncio.Protocol:
            return PolicedRequestHandler(
                server,
                admitted,
                policy,
                self._error_answer,
                auto_decompress=self._auto_decompress,
            )

        try:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: EdgeConnection(self._edge, inner),
                host,
                port,
                reuse_address=True,
                reuse_port=self._reuse_port or None,
                backlog=ACCEPT_BACKLOG,
            )
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        bound = self._server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    async def stop(self) -> None:
        """Stop accepting, finish in-flight requests (bounded), close every connection."""
        if self._server is not None:
            self._server.close()
        await cancel_handshakes(self._edge.handshakes)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self._edge.trim is not None:
            self._edge.trim.cancel()
