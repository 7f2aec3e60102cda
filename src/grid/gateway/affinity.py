"""Session affinity: ``x-grid-session`` bound to the candidate that served it.

A binding lives ``ttl_s`` after its last use, and at most ``max_size`` exist:
beyond that the least recently used one is dropped. ``existing_only``
candidates serve only sessions bound here, which is how they keep their
sessions while getting no new ones.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class AffinityTable:
    """Bounded, expiring session -> stable_id bindings (an LRU with a TTL)."""

    def __init__(
        self, ttl_s: float, max_size: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.max_size = max_size
        self._clock = clock
        self._bindings: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._bindings)

    def get(self, session: str) -> str | None:
        """The candidate bound to ``session``, if the binding is still alive."""
        entry = self._bindings.get(session)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            del self._bindings[session]
            return None
        return entry[0]

    def bind(self, session: str, stable_id: str) -> None:
        """Bind (or re-bind and renew) ``session`` to ``stable_id``."""
        bindings = self._bindings
        bindings[session] = (stable_id, self._clock() + self.ttl_s)
        bindings.move_to_end(session)
        while len(bindings) > self.max_size:
            bindings.popitem(last=False)
            self.evicted += 1
