"""The signals listener's policy: connection classes, their caps, and the request budget.

The mTLS signals listener (TCP 7947, SPEC-DECISIONS §1 and §7) holds at most
256 classified connections, of which peers hold at most 248, so 8 are always
left for the site's own certificate (Local: the gateway's poller and its
feedback reporter). A connection's class is only known once its TLS handshake
has completed and its leaf certificate has been classified; until then it is
pending, under its own smaller bound (``handshakes_max``), and when that is full
a newcomer evicts the oldest handshake of the source address holding the most.
So half-open or stalled handshakes, reopened as fast as they are closed, can
neither fill the Local reserve nor keep a Local caller's handshake from
finishing unless they come from the Local caller's own address.

The bookkeeping is the one ledger of every listener,
`grid.core.edge.connections.ConnectionBook`; `ListenerLimits.caps` gives it these
caps, and `connection_class` names the book's class of a classified certificate.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from grid.core.edge.connections import BookCaps, Eviction
from grid.core.trust import PeerClass


class ConnectionClass(enum.StrEnum):
    """A classified connection; the values are the metric labels."""

    LOCAL = "local"
    PEER = "peer"


@dataclass(frozen=True)
class ListenerLimits:
    """Every limit of the signals listener, with the spec's defaults."""

    connections_max: int = 256
    """Classified connections held at once (SPEC-DECISIONS §7); handshaking ones have
    their own bound, ``handshakes_max``. More admits more pollers at the cost of file
    descriptors and memory."""

    peer_connections_max: int = 248
    """Connections peers may hold; the rest (8) are kept for Local callers.
    Raising it serves more peers but shrinks the Local reserve."""

    handshakes_max: int = 64
    """Connections still handshaking (not yet classified) held at once, on top of the
    classified ones. When full, a newcomer evicts the oldest handshake of the source
    address holding the most, so half-open or stalled handshakes from one place cannot
    keep a Local caller from completing its own. Lower bounds descriptors and memory
    more tightly; higher tolerates more honest handshakes at once."""

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
        if self.handshakes_max < 1:
            raise ValueError("handshakes_max must be at least 1")
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

    def caps(self) -> BookCaps:
        """The connection book's caps: classified and pending counted apart, peers capped,
        and the busiest source's oldest handshake evicted when the handshakes are full."""
        return BookCaps(
            connections_max=self.connections_max + self.handshakes_max,
            classified_max=self.connections_max,
            handshakes_max=self.handshakes_max,
            class_caps={ConnectionClass.PEER.value: self.peer_connections_max},
            eviction=Eviction.BUSIEST_HANDSHAKE,
        )


def connection_class(peer_class: PeerClass) -> ConnectionClass | None:
    """The book's class of a certificate's `PeerClass`; None for an unknown certificate."""
    match peer_class:
        case PeerClass.LOCAL:
            return ConnectionClass.LOCAL
        case PeerClass.PEER:
            return ConnectionClass.PEER
        case PeerClass.UNKNOWN:
            return None
