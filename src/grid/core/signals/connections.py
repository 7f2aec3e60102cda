"""The signals listener's policy: connection classes, their caps, and the request budget.

The mTLS signals listener (TCP 7947, SPEC-DECISIONS §1 and §7) holds at most
256 connections, of which peers hold at most 248, so 8 are always left for the
site's own certificate (Local: the gateway's poller and, later, its feedback
reporter). A connection's class is only known once its TLS handshake has
completed and its leaf certificate has been classified, so a connection moves
through three counted states:

    accept ──► pending ──classify──► local | peer ──close──► gone
                  └──── handshake failed / refused / evicted ─► gone

`ConnectionBook` is that bookkeeping, pure and synchronous: the adapter calls
`accept` when TCP accepts, `classify` when the handshake completes, and
`release` when the connection ends, however it ends. A refusal at accept
aborts the socket before a byte is read; a refusal at classification closes it
at once. Pending handshakes are not counted against the classified caps: they
have their own, smaller bound (``handshakes_max``), and when it is full a
newcomer evicts the oldest handshake of the source address holding the most.
So half-open or stalled handshakes, reopened as fast as they are closed, can
neither fill the Local reserve nor keep a Local caller's handshake from
finishing unless they come from the Local caller's own address.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
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
    HANDSHAKES_FULL = "handshakes_full"
    """``handshakes_max`` connections are handshaking and none could be evicted."""
    EVICTED = "evicted"
    """A handshaking connection was closed to make room for a newcomer."""


@dataclass(frozen=True)
class ListenerLimits:
    """Every limit of the signals listener, with the spec's defaults."""

    connections_max: int = 256
    """Connections held at once, pending handshakes included (SPEC-DECISIONS §7).
    More admits more pollers at the cost of file descriptors and memory."""

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


@dataclass
class ConnectionBook:
    """Counts the listener's connections by state and class against `ListenerLimits`.

    Handshaking connections are counted apart from classified ones, under their own
    bound (``handshakes_max``): the total and per-class caps count only connections
    whose class is known. A connection accepted with a ``key`` (any hashable the
    adapter uses for it) and its source address can be evicted while it handshakes;
    the keys evicted are handed out by `take_evicted`, and the adapter closes them.
    """

    limits: ListenerLimits = field(default_factory=ListenerLimits)
    local: int = 0
    peer: int = 0
    anonymous: int = 0
    """Handshaking connections accepted without a key (never evicted)."""
    _sources: dict[str, dict[Hashable, float]] = field(default_factory=dict)
    _keys: dict[Hashable, str] = field(default_factory=dict)
    _evicted: list[Hashable] = field(default_factory=list)

    @property
    def pending(self) -> int:
        """Connections still handshaking."""
        return self.anonymous + len(self._keys)

    @property
    def classified(self) -> int:
        """Connections whose class is known."""
        return self.local + self.peer

    @property
    def total(self) -> int:
        """Every connection held, pending or classified."""
        return self.pending + self.classified

    def accept(
        self, key: Hashable | None = None, source: str = "", now: float = 0.0
    ) -> Refusal | None:
        """A TCP connection arrived: take a handshake slot, or refuse it.

        `Refusal.FULL` when every classified slot is taken (no class could take it);
        when the handshakes are at their bound the oldest handshake of the busiest
        source is evicted for it (`take_evicted`), else `Refusal.HANDSHAKES_FULL`.
        """
        if self.classified >= self.limits.connections_max:
            return Refusal.FULL
        if self.pending >= self.limits.handshakes_max and not self._evict():
            return Refusal.HANDSHAKES_FULL
        if key is None:
            self.anonymous += 1
        else:
            self._keys[key] = source
            self._sources.setdefault(source, {})[key] = now
        return None

    def _evict(self) -> bool:
        if not self._sources:
            return False
        source = max(self._sources, key=lambda s: len(self._sources[s]))
        victim = next(iter(self._sources[source]))
        self._drop(victim)
        self._evicted.append(victim)
        return True

    def _drop(self, key: Hashable | None) -> bool:
        """Forget a pending connection; False when it was not pending."""
        if key is None:
            if self.anonymous <= 0:
                return False
            self.anonymous -= 1
            return True
        source = self._keys.pop(key, None)
        if source is None:
            return False
        held = self._sources[source]
        del held[key]
        if not held:
            del self._sources[source]
        return True

    def take_evicted(self) -> list[Hashable]:
        """The keys evicted since the last call (the adapter closes them)."""
        evicted, self._evicted = self._evicted, []
        return evicted

    def classify(
        self, peer_class: PeerClass, key: Hashable | None = None
    ) -> ConnectionClass | Refusal:
        """The handshake completed: move a pending slot to its class, or refuse it.

        A refused connection gives its slot back here; the caller closes it
        and must not call `release` for it.
        """
        if not self._drop(key):
            raise RuntimeError("classify without a pending connection")
        if self.classified >= self.limits.connections_max:
            return Refusal.FULL
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

    def abandon(self, key: Hashable | None = None) -> None:
        """A pending connection ended before it was classified (handshake failed).

        An evicted connection was already forgotten; abandoning it again is a no-op.
        """
        if not self._drop(key) and key is None:
            raise RuntimeError("abandon without a pending connection")

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
