"""TLS session reuse for the egress probes: a resumed handshake instead of a full one.

A GridSite egress probe (`grid.adapters.tls_probe.probe`) is a TCP connect and
an mTLS handshake, every site round, for every site. A full handshake sends
and verifies both certificate chains and signs twice; a resumed one (TLS 1.3
PSK with a fresh key exchange, or a TLS 1.2 session) skips all of that, while
still proving, by a round trip, that the peer is there and holds the secret of
the full handshake whose leaf was checked. `TlsSessions` keeps, per probed
target, the session of the last good probe, and `handshake` runs a client
handshake over an open TCP stream with Python's public memory-BIO API (asyncio's
``start_tls`` cannot offer a session), offering it.

The certificate a resumed handshake reports is the one the full handshake was
shown, so a peer's new certificate would go unseen while sessions resume: a
session is offered for at most `FULL_HANDSHAKE_S` after the full handshake it
descends from, then the next probe makes a full one. A pin change in the
GridSite is judged on every probe (against that leaf). A peer that refuses the
session gets a full handshake in the same probe, transparently.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

FULL_HANDSHAKE_S = 60.0
"""Most seconds a target's sessions are resumed after its last full handshake. Longer
saves handshakes; shorter shows a peer's renewed certificate sooner."""

TICKET_WAIT_S = 0.25
"""Most seconds a probe waits after a TLS 1.3 handshake for the peer's session ticket
(sent just after the handshake). A peer that sends none is not waited for again
until its next full handshake."""

READ_BYTES = 64 * 1024


@dataclass(frozen=True)
class _Held:
    session: ssl.SSLSession | None
    """None: the target sent no ticket after its last full handshake."""
    verified_at: float
    """Clock time of the full handshake this session descends from."""


class TlsSessions:
    """The reusable session of each probed target (a key such as address and name)."""

    def __init__(
        self,
        full_handshake_s: float = FULL_HANDSHAKE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.full_handshake_s = full_handshake_s
        self._clock = clock
        self._held: dict[Hashable, _Held] = {}

    def __len__(self) -> int:
        return len(self._held)

    def _current(self, key: Hashable) -> _Held | None:
        held = self._held.get(key)
        if held is not None and self._clock() - held.verified_at >= self.full_handshake_s:
            del self._held[key]
            return None
        return held

    def offer(self, key: Hashable) -> ssl.SSLSession | None:
        """The session to offer ``key`` now, if one is held and young enough."""
        held = self._current(key)
        return held.session if held is not None else None

    def awaits_ticket(self, key: Hashable) -> bool:
        """Whether a probe of ``key`` should wait for a session ticket."""
        held = self._current(key)
        return held is None or held.session is not None

    def keep(self, key: Hashable, obj: ssl.SSLObject, session: ssl.SSLSession | None) -> None:
        """Keep what a passed probe of ``key`` over ``obj`` yielded (``session`` or None)."""
        held = self._current(key)
        # A resumed session descends from the same full handshake; so does a second
        # probe without a ticket, so that a peer sending none is asked again later.
        carried = held is not None and (obj.session_reused or held.session is session is None)
        verified_at = held.verified_at if carried and held is not None else self._clock()
        self._held[key] = _Held(session, verified_at)

    def drop(self, key: Hashable) -> None:
        """Forget ``key``'s session: its next probe makes a full handshake."""
        self._held.pop(key, None)

    def retain(self, keys: Iterable[Hashable]) -> None:
        """Forget every target but ``keys`` (those no longer probed)."""
        wanted = set(keys)
        for key in [k for k in self._held if k not in wanted]:
            del self._held[key]


@dataclass
class TlsClient:
    """A client TLS connection run over an asyncio stream through memory BIOs."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    obj: ssl.SSLObject
    incoming: ssl.MemoryBIO
    outgoing: ssl.MemoryBIO

    async def _flush(self) -> None:
        if self.outgoing.pending:
            self.writer.write(self.outgoing.read())
            await self.writer.drain()

    async def _feed(self) -> bool:
        data = await self.reader.read(READ_BYTES)
        if not data:
            self.incoming.write_eof()
            return False
        self.incoming.write(data)
        return True

    async def ticket(
        self, wait_s: float, offered: ssl.SSLSession | None = None
    ) -> ssl.SSLSession | None:
        """The session to offer next time, waiting up to ``wait_s`` for a new ticket.

        A TLS 1.2 session is resumable as the handshake ends. A TLS 1.3 peer sends
        its tickets just after, a fresh one after a resumption too (a ticket may
        be good for one use only), so this reads for one other than ``offered``'s.
        Without one in time it returns the session still held, if resumable.

        Reading ``obj.session`` copies the session (CPython serialises and parses
        it, the peer's certificate included: the dearest step of a resumed probe),
        so it is read once per batch of bytes that arrived, not before any did.
        """
        if self.obj.version() != "TLSv1.3":
            return self.obj.session
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                while self.incoming.pending or await self._feed():
                    try:
                        self.obj.read(READ_BYTES)  # processes the ticket; a probe sends no data
                    except ssl.SSLWantReadError:
                        pass
                    except ssl.SSLError:  # close_notify or garbage: no more tickets
                        break
                    session = self.obj.session
                    if _fresh(session, offered):
                        return session
        session = self.obj.session
        return session if _resumable(session) else None

    async def close(self, timeout_s: float) -> None:
        """Send close_notify, then close the stream; never raises."""
        with contextlib.suppress(OSError, TimeoutError, ssl.SSLError, ValueError):
            async with asyncio.timeout(timeout_s):
                with contextlib.suppress(ssl.SSLError):
                    self.obj.unwrap()
                await self._flush()
        self.writer.close()
        with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
            async with asyncio.timeout(timeout_s):
                await self.writer.wait_closed()


def _resumable(session: ssl.SSLSession | None) -> bool:
    return session is not None and session.has_ticket


def _fresh(session: ssl.SSLSession | None, offered: ssl.SSLSession | None) -> bool:
    """A resumable session from a ticket other than ``offered``'s (OpenSSL names a
    TLS 1.3 session by its ticket's digest)."""
    return _resumable(session) and (offered is None or session.id != offered.id)  # type: ignore[union-attr]


async def handshake(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    ctx: ssl.SSLContext,
    server_hostname: str,
    session: ssl.SSLSession | None,
) -> TlsClient:
    """A client TLS handshake over an open stream, offering ``session``.

    Raises what ``ssl`` raises for a failed handshake (`ssl.SSLError`,
    certificate verification included) and `ConnectionResetError` when the peer
    closes before it completes; the caller bounds the time.
    """
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=server_hostname, session=session)
    client = TlsClient(reader, writer, obj, incoming, outgoing)
    while True:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            await client._flush()
            if not await client._feed():
                raise ConnectionResetError("the peer closed during the handshake") from None
    await client._flush()
    return client
