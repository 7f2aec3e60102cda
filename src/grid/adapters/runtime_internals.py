"""Every use of a private part of asyncio, aiohttp or the C library, in one place.

The edge needs three things no public API offers:

- asyncio's TLS protocol (``asyncio.sslproto.SSLProtocol``) with a smaller read
  buffer (`TLS_READ_BUFFER_BYTES` instead of 256 KiB per connection), fed with
  ciphertext already read from the socket (`start_compact_tls`);
- two facts about aiohttp's connection handler (``aiohttp.web_protocol.RequestHandler``):
  how many request heads it has parsed (`heads_parsed`) and whether it is waiting
  for the next one (`awaiting_head`);
- glibc's ``malloc_trim``, after ``gc.collect``, to hand freed heap back to the OS
  after connection churn (`HeapTrim`), and the collector's permanent generation
  for what a process built to start, with a young-generation threshold that
  requests in flight do not cross (`freeze_startup_heap`).

Nothing else in Grid touches these. ``tests/adapters/test_runtime_internals.py``
pins the Python and aiohttp versions this was checked against (those of
``deploy/container/requirements.lock`` and the container's base image) and checks
each private name exists, so an upgrade that moves one fails there, by name,
instead of somewhere in the edge.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import ssl
from asyncio import sslproto
from typing import cast

from aiohttp.web_protocol import RequestHandler

TLS_READ_BUFFER_BYTES = 16 * 1024
"""Bytes of ciphertext read from the socket at once on a TLS connection, and the
buffer each TLS connection keeps for it. One TLS record is at most 16 KiB, so a
larger buffer saves only system calls on big bodies, and every idle connection
pays for it (asyncio's default is 256 KiB)."""

YOUNG_COLLECTION_THRESHOLD = 50_000
"""Tracked objects allocated (net of those freed) before the collector scans the young
generation, once the start-up heap is frozen. At CPython's 700, the objects of a few
requests in flight cross it every couple of dozen requests, and each scan (about
0.4 ms on a gateway at concurrency 16) finds almost nothing: what a request makes is
freed by reference counting when it ends. Reference cycles (closed connections) are
still collected, later, and by `HeapTrim` after connections close."""

HEAP_TRIM_DELAY_S = 1.0
"""Seconds after a connection closes before freed heap is handed back to the OS;
closes within that time share one trim, so churn costs one trim a second at most."""

PRIVATE_NAMES = {
    sslproto.SSLProtocol: ("max_size", "_app_transport", "get_buffer", "buffer_updated"),
    RequestHandler: ("_request_count", "_waiter"),
}
"""The private (or undocumented) attributes used here, by class, for the pinned test."""


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


def heads_parsed(handler: RequestHandler) -> int:
    """Request heads the handler has parsed so far (a malformed one included)."""
    count: int = handler._request_count
    return count


def awaiting_head(handler: RequestHandler) -> bool:
    """True while the handler waits, between requests, for the next request head."""
    waiter = handler._waiter
    return waiter is not None and not waiter.done()


def freeze_startup_heap() -> None:
    """Collect once, then move every object left to the collector's permanent generation.

    What a process builds to start (modules, the SDKs it imports, its config and
    snapshot) lives as long as the process, yet each full collection walks it:
    about 110,000 objects and 25 ms for a gateway. Frozen, collections walk only
    what was made since, such as the reference cycles of closed connections. From
    here on the young generation is scanned every `YOUNG_COLLECTION_THRESHOLD`
    objects (the older generations' thresholds are CPython's defaults).
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)


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
