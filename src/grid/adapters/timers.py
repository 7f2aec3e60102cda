"""One heap for all of a machine's timers, with a single event-loop handle.

The SWIM machine schedules timers but never cancels them (a stale timer is
recognised and ignored when it fires), so its adapter needs no per-timer
handles: only the earliest pending timer has a ``loop.call_at`` armed at any
time. When it fires, the owner task is woken, takes every due timer in order
and re-arms the handle for the next one. Nothing per timer outlives its firing.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class TimerHeap(Generic[T]):
    """The machine's timers in one heap, with one ``loop.call_at`` for the earliest.

    `schedule` pushes; when the new timer is the earliest, the single armed
    handle is moved. When it fires, `wake` tells the owner task, which takes
    every due timer with `pop_due` and calls `rearm`.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, wake: Callable[[], None]) -> None:
        self._loop = loop
        self._wake = wake
        self._heap: list[tuple[float, int, T]] = []
        self._order = itertools.count()
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = math.inf

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, timer: T, at: float) -> None:
        """Fire `timer` at loop time `at` (never earlier)."""
        heapq.heappush(self._heap, (at, next(self._order), timer))
        if at < self._armed_at:
            self._arm(at)

    def pop_due(self, now: float) -> list[T]:
        """Remove and return every timer due at `now`, earliest first."""
        heap = self._heap
        due: list[T] = []
        while heap and heap[0][0] <= now:
            due.append(heapq.heappop(heap)[2])
        return due

    def rearm(self) -> None:
        """Arm the handle for the earliest pending timer, if it is not armed."""
        if self._heap and self._heap[0][0] < self._armed_at:
            self._arm(self._heap[0][0])

    def close(self) -> None:
        """Cancel the armed handle and forget every timer."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._armed_at = math.inf
        self._heap.clear()

    def _arm(self, at: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = at
        self._handle = self._loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._armed_at = math.inf
        self._wake()
