"""The one connection ledger of every Grid listener: caps, classes and eviction, by key.

Every connection a listener accepts moves through three counted states:

    accept ──► pending ──classify──► class ──settle──► settled ──release──► gone
                  └── refused / handshake failed / evicted ──────────────► gone

*Pending* is a connection whose class is not known yet (its TLS handshake is
running); *classified* connections are counted per class (``local`` and
``peer`` on the signals listener, one unnamed class elsewhere); a connection is
*settled* once it has sent a complete request head. `ConnectionBook` is that
bookkeeping, pure and synchronous: the adapter passes a key of its own for each
connection (its protocol object) and the time from its clock, calls `accept`
when TCP accepts, `classify` when the handshake completes, `settle` at the first
complete head and `release` when the connection ends, however it ends.

Three caps bound it (`BookCaps`): every connection held, classified ones, and
pending ones, plus a cap per class. A newcomer past a cap is refused, unless the
eviction rule names a victim to close for it:

- `Eviction.BUSIEST_HANDSHAKE`: when the pending cap is full, the oldest pending
  connection of the source holding the most pending ones (so stalled handshakes
  from one place cannot lock a Local caller out of its own listener);
- `Eviction.OLDEST_UNSETTLED`: when any cap is full, the oldest connection that
  has not yet sent a complete head, once older than ``evictable_after_s`` (so a
  flood of silent or slow connections cannot lock out a health probe, whose head
  is complete within milliseconds).

The keys evicted are handed out by `take_evicted`, and the adapter closes them;
the book has already forgotten them, so their later `release` changes nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field


class Refusal(enum.StrEnum):
    """Why a connection was refused or closed by the book."""

    FULL = "full"
    """Every connection slot, or every classified slot, is taken."""
    CLASS_FULL = "class_full"
    """The connection's class already holds its cap."""
    UNAUTHORIZED = "unauthorized"
    """The connection has no class it may be served in (an unknown certificate)."""
    HANDSHAKES_FULL = "handshakes_full"
    """The pending cap is full and no pending connection could be evicted."""
    EVICTED = "evicted"
    """An older connection closed to make room for a newcomer."""


class Eviction(enum.StrEnum):
    """Which connection, if any, a full book closes to admit a newcomer."""

    NONE = "none"
    BUSIEST_HANDSHAKE = "busiest_handshake"
    OLDEST_UNSETTLED = "oldest_unsettled"


@dataclass(frozen=True)
class BookCaps:
    """The caps of one listener's book."""

    connections_max: int
    """Connections held at once, pending ones included."""
    classified_max: int | None = None
    """Classified connections held at once (None: ``connections_max``)."""
    handshakes_max: int | None = None
    """Pending connections held at once (None: ``connections_max``)."""
    class_caps: Mapping[str, int] = field(default_factory=dict)
    """Most connections of each named class; a class not listed has no cap of its own."""
    eviction: Eviction = Eviction.NONE
    evictable_after_s: float = 0.5
    """With `Eviction.OLDEST_UNSETTLED`: how long a connection is safe from eviction,
    time for an honest client's handshake and head."""

    def __post_init__(self) -> None:
        if self.connections_max < 1:
            raise ValueError("a listener needs at least one connection slot")
        for name in ("classified_max", "handshakes_max"):
            value = getattr(self, name)
            if value is not None and not 1 <= value <= self.connections_max:
                raise ValueError(f"{name} must be in 1..connections_max")
        if self.evictable_after_s < 0:
            raise ValueError("evictable_after_s must not be negative")

    @property
    def classified_cap(self) -> int:
        return self.connections_max if self.classified_max is None else self.classified_max

    @property
    def handshakes_cap(self) -> int:
        return self.connections_max if self.handshakes_max is None else self.handshakes_max


@dataclass
class _Held:
    source: str
    accepted_at: float
    name: str | None = None
    """The class once classified; None while pending."""


@dataclass
class ConnectionBook:
    """Counts a listener's connections by state and class against `BookCaps`."""

    caps: BookCaps
    refusals: dict[Refusal, int] = field(default_factory=lambda: dict.fromkeys(Refusal, 0))
    """Refusals and evictions so far, by reason."""
    _held: dict[Hashable, _Held] = field(default_factory=dict)
    _pending: dict[str, dict[Hashable, None]] = field(default_factory=dict)
    """Pending keys by source address, oldest first."""
    _unsettled: dict[Hashable, float] = field(default_factory=dict)
    """Keys without a complete head, oldest first, with their accept times."""
    _classes: dict[str, int] = field(default_factory=dict)
    _pending_count: int = 0
    _evicted: list[Hashable] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Every connection held, pending or classified."""
        return len(self._held)

    @property
    def pending(self) -> int:
        """Connections whose class is not known yet."""
        return self._pending_count

    @property
    def classified(self) -> int:
        """Connections whose class is known."""
        return self.total - self.pending

    def held(self, name: str) -> int:
        """Connections of class ``name`` held now."""
        return self._classes.get(name, 0)

    @property
    def refused(self) -> int:
        """Connections refused so far (evictions not included)."""
        return sum(n for reason, n in self.refusals.items() if reason is not Refusal.EVICTED)

    @property
    def evicted(self) -> int:
        """Connections evicted so far."""
        return self.refusals[Refusal.EVICTED]

    def accept(self, key: Hashable, source: str, now: float) -> Refusal | None:
        """A TCP connection arrived: hold it as pending, or refuse it.

        Past a cap the eviction rule may close older connections for it (`take_evicted`).
        """
        if key in self._held:
            raise RuntimeError("accept of a connection already held")
        while (blocked := self._blocked()) is not None:
            victim = self._victim(blocked, now)
            if victim is None:
                return self._refuse(blocked)
            self._forget(victim)
            self._evicted.append(victim)
            self.refusals[Refusal.EVICTED] += 1
        self._held[key] = _Held(source, now)
        self._pending.setdefault(source, {})[key] = None
        self._pending_count += 1
        self._unsettled[key] = now
        return None

    def _blocked(self) -> Refusal | None:
        if self.total >= self.caps.connections_max or self.classified >= self.caps.classified_cap:
            return Refusal.FULL
        if self.pending >= self.caps.handshakes_cap:
            return Refusal.HANDSHAKES_FULL
        return None

    def _victim(self, blocked: Refusal, now: float) -> Hashable | None:
        match self.caps.eviction:
            case Eviction.BUSIEST_HANDSHAKE:
                if not self._pending or self.classified >= self.caps.classified_cap:
                    return None
                source = max(self._pending, key=lambda s: len(self._pending[s]))
                return next(iter(self._pending[source]))
            case Eviction.OLDEST_UNSETTLED:
                for key, accepted_at in self._unsettled.items():
                    if now - accepted_at < self.caps.evictable_after_s:
                        return None  # every later one is younger still
                    if blocked is not Refusal.HANDSHAKES_FULL or self._held[key].name is None:
                        return key
                return None
            case _:
                return None

    def _refuse(self, reason: Refusal) -> Refusal:
        self.refusals[reason] += 1
        return reason

    def take_evicted(self) -> list[Hashable]:
        """The keys evicted since the last call (the adapter closes them)."""
        evicted, self._evicted = self._evicted, []
        return evicted

    def classify(self, key: Hashable, name: str | None) -> str | Refusal:
        """The handshake completed: move the pending connection to class ``name``.

        ``name`` None means it may not be served in any class. A refused
        connection is forgotten here; the caller closes it.
        """
        held = self._held.get(key)
        if held is None or held.name is not None:
            raise RuntimeError("classify without a pending connection")
        refused = self._class_refusal(name)
        if refused is not None or name is None:
            self._forget(key)
            return self._refuse(refused or Refusal.UNAUTHORIZED)
        self._leave_pending(key, held.source)
        held.name = name
        self._classes[name] = self.held(name) + 1
        return name

    def _class_refusal(self, name: str | None) -> Refusal | None:
        if name is None:
            return Refusal.UNAUTHORIZED
        if self.classified >= self.caps.classified_cap:
            return Refusal.FULL
        cap = self.caps.class_caps.get(name)
        if cap is not None and self.held(name) >= cap:
            return Refusal.CLASS_FULL
        return None

    def settle(self, key: Hashable) -> None:
        """The connection sent a complete request head: it is no longer evictable."""
        self._unsettled.pop(key, None)

    def release(self, key: Hashable) -> None:
        """The connection ended, in whatever state; a key the book no longer holds
        (evicted or refused) changes nothing."""
        self._forget(key)

    def _forget(self, key: Hashable) -> None:
        held = self._held.pop(key, None)
        if held is None:
            return
        self._unsettled.pop(key, None)
        if held.name is not None:
            self._classes[held.name] -= 1
        else:
            self._leave_pending(key, held.source)

    def _leave_pending(self, key: Hashable, source: str) -> None:
        keys = self._pending[source]
        del keys[key]
        self._pending_count -= 1
        if not keys:
            del self._pending[source]
