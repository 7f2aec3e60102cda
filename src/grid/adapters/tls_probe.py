"""The GridSite egress probe: a TCP connect plus an mTLS handshake on loopback or beyond.

A site becomes Active only when a live mTLS probe of ``egress.address`` passes
and the leaf certificate the peer presents has the pinned SHA-256 fingerprint
(SPEC-DECISIONS §2). The probe verifies the chain against the grid's CA, offers
this site's certificate as the client certificate, and returns the peer leaf's
fingerprint for the caller to compare; it never sends application data.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path

from grid.core.address import parse_address
from grid.core.trust import fingerprint_der
from grid.errors import ValidationError

PROBE_TIMEOUT_S = 3.0
"""Connect-plus-handshake budget. Shorter marks slow peers Unreachable sooner."""


@dataclass(frozen=True)
class ProbeResult:
    """``fingerprint`` is the peer leaf's SHA-256 when the handshake completed."""

    reachable: bool
    fingerprint: str | None = None
    error: str = ""
    pem: str | None = None
    """The peer leaf certificate in PEM (public material only)."""


def client_context(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    """A TLS client context that verifies the CA chain and presents our site cert."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def server_context(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    """A TLS server context that requires a client certificate from the CA."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


async def probe(
    address: str,
    ctx: ssl.SSLContext,
    server_name: str | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> ProbeResult:
    """Connect to ``host:port``, complete mTLS, and report the peer leaf fingerprint."""
    try:
        host, port = parse_address(address)
        async with asyncio.timeout(timeout_s):
            _reader, writer = await asyncio.open_connection(
                host, port, ssl=ctx, server_hostname=server_name or host
            )
    except (OSError, TimeoutError, ValidationError, ssl.SSLError) as exc:
        return ProbeResult(False, error=type(exc).__name__)
    try:
        ssl_obj = writer.get_extra_info("ssl_object")
        der = ssl_obj.getpeercert(binary_form=True) if ssl_obj is not None else None
        if not der:
            return ProbeResult(True)
        return ProbeResult(True, fingerprint_der(der), pem=ssl.DER_cert_to_PEM_cert(der))
    finally:
        writer.close()
        try:
            async with asyncio.timeout(timeout_s):
                await writer.wait_closed()
        except (OSError, TimeoutError, ssl.SSLError):
            pass


class EgressListener:
    """A minimal mTLS endpoint presenting the site certificate at the egress address.

    In a cluster the site's gateway owns the egress; in the embedded default the
    operator serves this stand-in so peers can verify the site's certificate.
    It completes the handshake and closes the connection.
    """

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self._ctx = ctx
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (0 picks a free port); returns the bound address."""

        async def handle(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        self._server = await asyncio.start_server(handle, host, port, ssl=self._ctx)
        bound = self._server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    async def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
