"""Virtual time for deterministic simulations: a clock with an event heap.

Nothing sleeps. `FakeClock.run_until` pops due events in time order (ties in
scheduling order) and advances `now` to each, so hours of protocol time run in
milliseconds and every run with the same inputs replays exactly.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any


class FakeClock:
    """A virtual monotonic clock, in seconds, driving scheduled callbacks."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def call_at(self, at: float, callback: Callable[..., None], *args: Any) -> None:
        """Run `callback(*args)` when virtual time reaches `at` (never in the past)."""
        heapq.heappush(self._heap, (max(at, self.now), next(self._order), callback, args))

    def call_later(self, delay_s: float, callback: Callable[..., None], *args: Any) -> None:
        """Run `callback(*args)` `delay_s` seconds from now."""
        self.call_at(self.now + delay_s, callback, *args)

    def run_until(self, until: float) -> int:
        """Run every event due at or before `until`, then set `now` to `until`."""
        heap = self._heap
        pop = heapq.heappop
        count = 0
        while heap and heap[0][0] <= until:
            at, _, callback, args = pop(heap)
            self.now = at
            callback(*args)
            count += 1
        self.now = max(self.now, until)
        return count

    def run_for(self, seconds: float) -> int:
        """Advance virtual time by `seconds`, running what falls due."""
        return self.run_until(self.now + seconds)
