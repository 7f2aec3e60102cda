"""An asyncio event loop on virtual time, for tests of schedules and timeouts.

`VirtualTimeLoop.time()` is a virtual clock that starts at 0. When the loop
has nothing ready and would block waiting for its next timer, it does not
sleep: it polls its selector without waiting and moves the clock straight to
that timer. ``asyncio.sleep(3600)`` therefore returns at once with
``loop.time()`` an hour later, while every callback still runs in the order a
real loop would run it. Meant for code whose waits are timers; real sockets do
not belong on it (their replies would lose the race against jumped timers).
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any


class _JumpingSelector(selectors.DefaultSelector):
    """A selector that never blocks: a wait for ``timeout`` advances the clock instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._virtual = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if not events and timeout is not None and timeout > 0:
            self._virtual.now += timeout
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock jumps to the next timer instead of waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        """The virtual time in seconds."""
        return self.now
