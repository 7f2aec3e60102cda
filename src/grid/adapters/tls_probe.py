"""The GridSite egress probe: a TCP connect plus an mTLS handshake on loopback or beyond.

A site becomes Active only when a live mTLS probe of ``egress.address`` passes
and the leaf certificate the peer presents has the pinned SHA-256 fingerprint
(SPEC-DECISIONS §2). The probe verifies the chain against the grid's CA, offers
this site's certificate as the client certificate, and returns the peer leaf's
fingerprint for the caller to compare; it never sends application data. An
egress declared ``tls.mode: Plaintext`` is probed as upstream Grid does, with a
TCP connect only (`tcp_probe`): reachability, never identity.

Each result carries its `ProbeOutcome`, upstream's bounded reason vocabulary
(the ``outcome`` label of ``grid_gateway_probe_total``). The connect and the
handshake are timed apart within one budget, so a timeout says which of the two
it interrupted.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from grid.adapters.tls_sessions import TICKET_WAIT_S, TlsSessions, handshake
from grid.core.address import parse_address
from grid.core.trust import fingerprint_der
from grid.errors import ValidationError

PROBE_TIMEOUT_S = 3.0
"""Connect-plus-handshake budget. Shorter marks slow peers Unreachable sooner."""


class ProbeOutcome(StrEnum):
    """What one probe met, in upstream Grid's words (its ``GatewayProbeOutcome`` reasons)."""

    VERIFIED = "Verified"
    """The handshake completed (the caller compares the leaf with the pins)."""
    PIN_MISMATCH = "PinMismatch"
    """The handshake completed and the leaf matches no pin of the site."""
    ADDRESS_MISSING = "AddressMissing"
    """The GridSite names no egress address (or one that does not parse)."""
    TRUST_MATERIAL_MISSING = "TrustMaterialMissing"
    """An mTLS probe is due but this operator holds no CA, certificate and key."""
    CONNECT_TIMEOUT = "ConnectTimeout"
    CONNECTION_FAILED = "ConnectionFailed"
    HANDSHAKE_TIMEOUT = "HandshakeTimeout"
    TLS_PROTOCOL_ERROR = "TlsProtocolError"
    UNTRUSTED_ISSUER = "UntrustedIssuer"
    """The peer's chain does not lead to the grid CA."""
    IDENTITY_MISMATCH = "IdentityMismatch"
    """The peer's certificate does not name ``egress.tls.serverName``."""
    CERTIFICATE_EXPIRED = "CertificateExpired"
    CERTIFICATE_NOT_YET_VALID = "CertificateNotYetValid"
    PLAINTEXT_REACHABLE = "PlaintextReachable"
    """A plaintext egress accepted a TCP connection: reachable, identity unproven."""
    PLAINTEXT_UNREACHABLE = "PlaintextUnreachable"


MUTUAL_OUTCOMES = tuple(
    o
    for o in ProbeOutcome
    if o not in (ProbeOutcome.PLAINTEXT_REACHABLE, ProbeOutcome.PLAINTEXT_UNREACHABLE)
)
"""The outcomes an mTLS probe can meet."""
PLAINTEXT_OUTCOMES = (
    ProbeOutcome.ADDRESS_MISSING,
    ProbeOutcome.PLAINTEXT_REACHABLE,
    ProbeOutcome.PLAINTEXT_UNREACHABLE,
)
"""The outcomes a plaintext (TCP connect) probe can meet."""

_VERIFY_CODES = {
    10: ProbeOutcome.CERTIFICATE_EXPIRED,  # X509_V_ERR_CERT_HAS_EXPIRED
    9: ProbeOutcome.CERTIFICATE_NOT_YET_VALID,  # X509_V_ERR_CERT_NOT_YET_VALID
    62: ProbeOutcome.IDENTITY_MISMATCH,  # X509_V_ERR_HOSTNAME_MISMATCH
}
"""OpenSSL verification codes with an outcome of their own; any other is UntrustedIssuer."""


@dataclass(frozen=True)
class ProbeResult:
    """``fingerprint`` is the peer leaf's SHA-256 when the handshake completed."""

    reachable: bool
    fingerprint: str | None = None
    error: str = ""
    pem: str | None = None
    """The peer leaf certificate in PEM (public material only)."""
    outcome: ProbeOutcome = ProbeOutcome.VERIFIED
    duration_s: float = 0.0
    """Wall time the probe took, connect and handshake together."""
    resumed: bool = False
    """The handshake resumed the session of an earlier probe (no certificates sent)."""


def _tls_outcome(exc: ssl.SSLError) -> ProbeOutcome:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return _VERIFY_CODES.get(exc.verify_code, ProbeOutcome.UNTRUSTED_ISSUER)
    return ProbeOutcome.TLS_PROTOCOL_ERROR


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


async def _connect(
    address: str, timeout_s: float
) -> tuple[asyncio.StreamReader | None, asyncio.StreamWriter | None, ProbeResult | None]:
    """A TCP connection to ``host:port`` within ``timeout_s``, or the failed result."""
    start = time.monotonic()
    try:
        host, port = parse_address(address)
    except ValidationError as exc:
        return (
            None,
            None,
            ProbeResult(False, error=type(exc).__name__, outcome=ProbeOutcome.ADDRESS_MISSING),
        )
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as exc:
        timed_out = isinstance(exc, TimeoutError)
        outcome = ProbeOutcome.CONNECT_TIMEOUT if timed_out else ProbeOutcome.CONNECTION_FAILED
        spent = time.monotonic() - start
        failed = ProbeResult(False, error=type(exc).__name__, outcome=outcome, duration_s=spent)
        return None, None, failed
    return reader, writer, None


async def _close(writer: asyncio.StreamWriter, timeout_s: float) -> None:
    writer.close()
    try:
        async with asyncio.timeout(timeout_s):
            await writer.wait_closed()
    except (OSError, TimeoutError, ssl.SSLError):
        pass


async def tcp_probe(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """A plaintext egress probe: a TCP connect only, closed at once (upstream's rule).

    It proves reachability and nothing about identity, so it never makes a site Active.
    """
    start = time.monotonic()
    _reader, writer, failed = await _connect(address, timeout_s)
    if writer is None:
        assert failed is not None
        return ProbeResult(
            False,
            error=failed.error,
            outcome=_plaintext(failed.outcome),
            duration_s=failed.duration_s,
        )
    await _close(writer, timeout_s)
    return ProbeResult(
        True, outcome=ProbeOutcome.PLAINTEXT_REACHABLE, duration_s=time.monotonic() - start
    )


def _plaintext(outcome: ProbeOutcome) -> ProbeOutcome:
    if outcome is ProbeOutcome.ADDRESS_MISSING:
        return outcome
    return ProbeOutcome.PLAINTEXT_UNREACHABLE


async def probe(
    address: str,
    ctx: ssl.SSLContext,
    server_name: str | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
    sessions: TlsSessions | None = None,
    pins: Collection[str] = (),
) -> ProbeResult:
    """Connect to ``host:port``, complete mTLS, and report the peer leaf fingerprint.

    ``timeout_s`` bounds the connect and the handshake together. With
    ``sessions`` the handshake offers the session of this target's last probe
    (`grid.adapters.tls_sessions`), and the session it yields is kept only when
    the leaf is one of ``pins``; any other end drops the target's session. A
    resumed session reports the leaf of its full handshake, so when that leaf is
    no longer pinned the probe makes a full handshake at once, to judge the leaf
    the peer presents now.
    """
    start = time.monotonic()
    result = await _probe_once(address, ctx, server_name, timeout_s, sessions, pins)
    if result.resumed and result.fingerprint not in pins:
        remaining = max(0.001, timeout_s - (time.monotonic() - start))
        result = await _probe_once(address, ctx, server_name, remaining, sessions, pins)
    return result


async def _probe_once(
    address: str,
    ctx: ssl.SSLContext,
    server_name: str | None,
    timeout_s: float,
    sessions: TlsSessions | None,
    pins: Collection[str],
) -> ProbeResult:
    start = time.monotonic()
    key = session_key(address, server_name)
    reader, writer, failed = await _connect(address, timeout_s)
    if failed is not None:
        if sessions is not None:
            sessions.drop(key)
        return failed
    assert reader is not None and writer is not None
    host = parse_address(address)[0]
    client, kept = None, False
    offered = sessions.offer(key) if sessions is not None else None
    try:
        try:
            remaining = max(0.001, timeout_s - (time.monotonic() - start))
            async with asyncio.timeout(remaining):
                client = await handshake(reader, writer, ctx, server_name or host, offered)
        except TimeoutError as exc:
            return _failed(exc, ProbeOutcome.HANDSHAKE_TIMEOUT, start)
        except ssl.SSLError as exc:
            return _failed(exc, _tls_outcome(exc), start)
        except OSError as exc:
            return _failed(exc, ProbeOutcome.CONNECTION_FAILED, start)
        spent = time.monotonic() - start
        der = client.obj.getpeercert(binary_form=True)
        if not der:
            return ProbeResult(True, duration_s=spent)
        pem = ssl.DER_cert_to_PEM_cert(der)
        resumed = client.obj.session_reused
        result = ProbeResult(True, fingerprint_der(der), pem=pem, duration_s=spent, resumed=resumed)
        if sessions is not None and result.fingerprint in pins:
            resumable = None
            if sessions.awaits_ticket(key):
                wait_s = min(TICKET_WAIT_S, max(0.0, timeout_s - spent))
                resumable = await client.ticket(wait_s, offered)
            sessions.keep(key, client.obj, resumable)
            kept = True
        return result
    finally:
        if sessions is not None and not kept:
            sessions.drop(key)
        if client is not None:
            await client.close(timeout_s)
        else:
            await _close(writer, timeout_s)


def session_key(address: str, server_name: str | None) -> tuple[str, str | None]:
    """The key under which `probe` keeps the session of ``address`` and ``server_name``."""
    return (address, server_name)


def _failed(exc: BaseException, outcome: ProbeOutcome, start: float) -> ProbeResult:
    return ProbeResult(
        False, error=type(exc).__name__, outcome=outcome, duration_s=time.monotonic() - start
    )
