"""The signals listener's policy: connection classes, their caps, and the request budget.

The mTLS signals listener (TCP 7947, SPEC-DECISIONS §1 and §7) holds at most
256 connections, of which peers hold at most 248, so 8 are always left for the
site's own certificate (Local: the gateway's poller and, later, its feedback
reporter). A connection's class is only known once its TLS handshake has
completed and its leaf certificate has been classified, so a connection moves
through three counted states:

    accept ──► pending ──classify──► local | peer ──close──► gone
                  └──── handshake failed / refused ────────► gone

`ConnectionBook` is that bookkeeping, pure and synchronous: the adapter calls
`accept` when TCP accepts, `classify` when the handshake completes, and
`release` when the connection ends, however it ends. A refusal at accept
aborts the socket before a byte is read; a refusal at classification closes it
at once. Pending handshakes count against the total cap, and the handshake
deadline bounds how long one can hold its slot, so peers retrying in a loop can
take the reserved slots only for the length of a handshake.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from grid.core.trust import PeerClass


class ConnectionClass(enum.StrEnum):
    """A classified connection; the values are the metric labels."""

    LOCAL = "local"
    PEER = "peer"


class Refusal(enum.StrEnum):
    """Why a connection was refused; the values are the metric labels."""

    FULL = "full"
    """The listener already holds ``connections_max`` connections."""
    PEERS_FULL = "peers_full"
    """Peers already hold ``peer_connections_max`` connections."""
    UNAUTHORIZED = "unauthorized"
    """The certificate is neither Local nor an authorized peer."""


@dataclass(frozen=True)
class ListenerLimits:
    """Every limit of the signals listener, with the spec's defaults."""

    connections_max: int = 256
    """Connections held at once, pending handshakes included (SPEC-DECISIONS §7).
    More admits more pollers at the cost of file descriptors and memory."""

    peer_connections_max: int = 248
    """Connections peers may hold; the rest (8) are kept for Local callers.
    Raising it serves more peers but shrinks the Local reserve."""

    handshake_timeout_s: float = 5.0
    """Seconds from TCP accept to a completed TLS handshake. Shorter frees slots held
    by stalled clients sooner but may cut off peers on slow links."""

    header_timeout_s: float = 5.0
    """Seconds a request head may take: the first from accept (handshake included), a
    later one from its first byte. A slow sender loses its connection after this;
    longer tolerates worse networks but lets a slow client hold a slot longer."""

    idle_timeout_s: float = 60.0
    """Seconds a keep-alive connection may sit between requests before it is closed.
    Longer saves re-handshakes for pollers; shorter frees slots sooner. Pollers
    poll far more often than this."""

    request_budget_s: float = 5.0
    """Seconds for a whole request: reading, deciding and answering (seed 000's
    five-second budget). Past it the request fails instead of holding its slot."""

    request_line_bytes_max: int = 4096
    """Longest request line in bytes; a longer one is refused with 414 or 400 and
    the connection closed. The endpoints' paths are short."""

    header_field_bytes_max: int = 8190
    """Longest single header line in bytes; a longer one is refused with 431 or 400."""

    headers_max: int = 64
    """Most header lines in one request; more are refused with 431 or 400."""

    def __post_init__(self) -> None:
        if not 0 < self.peer_connections_max <= self.connections_max:
            raise ValueError("peer_connections_max must be in 1..connections_max")
        for name in ("handshake_timeout_s", "header_timeout_s", "idle_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if not self.request_budget_s > 0:
            raise ValueError("request_budget_s must be positive")

    @property
    def local_reserved(self) -> int:
        """Slots peers can never take (8 by default)."""
        return self.connections_max - self.peer_connections_max


@dataclass
class ConnectionBook:
    """Counts the listener's connections by state and class against `ListenerLimits`."""

    limits: ListenerLimits = field(default_factory=ListenerLimits)
    pending: int = 0
    local: int = 0
    peer: int = 0

    @property
    def total(self) -> int:
        """Every connection held, pending or classified."""
        return self.pending + self.local + self.peer

    def accept(self) -> Refusal | None:
        """A TCP connection arrived: take a pending slot, or refuse it (`Refusal.FULL`)."""
        if self.total >= self.limits.connections_max:
            return Refusal.FULL
        self.pending += 1
        return None

    def classify(self, peer_class: PeerClass) -> ConnectionClass | Refusal:
        """The handshake completed: move a pending slot to its class, or refuse it.

        A refused connection gives its slot back here; the caller closes it
        and must not call `release` for it.
        """
        if self.pending <= 0:
            raise RuntimeError("classify without a pending connection")
        self.pending -= 1
        match peer_class:
            case PeerClass.LOCAL:
                self.local += 1
                return ConnectionClass.LOCAL
            case PeerClass.PEER:
                if self.peer >= self.limits.peer_connections_max:
                    return Refusal.PEERS_FULL
                self.peer += 1
                return ConnectionClass.PEER
            case PeerClass.UNKNOWN:
                return Refusal.UNAUTHORIZED

    def abandon(self) -> None:
        """A pending connection ended before it was classified (handshake failed)."""
        if self.pending <= 0:
            raise RuntimeError("abandon without a pending connection")
        self.pending -= 1

    def release(self, connection_class: ConnectionClass) -> None:
        """A classified connection ended."""
        match connection_class:
            case ConnectionClass.LOCAL:
                if self.local <= 0:
                    raise RuntimeError("release without a local connection")
                self.local -= 1
            case ConnectionClass.PEER:
                if self.peer <= 0:
                    raise RuntimeError("release without a peer connection")
                self.peer -= 1
