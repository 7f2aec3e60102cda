"""Poll a condition until it holds, with a deadline: the one way tests wait for a state.

A fixed sleep is either too short under load (a flaky failure) or too long when
idle (a slow suite); polling returns as soon as the state is reached and fails
only at a deadline generous enough for a loaded machine. The failure names what
was awaited and the last value the check returned, so a red run says which
state never came.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

TIMEOUT_S = 10.0
"""Default deadline, seconds: ample for a loopback round trip on a loaded 2-core machine."""

INTERVAL_S = 0.02
"""Default pause between two checks, seconds: short next to any deadline, long enough
not to starve the event loop the awaited state depends on."""


async def eventually(
    check: Callable[[], T] | Callable[[], Awaitable[T]],
    what: str,
    *,
    timeout_s: float = TIMEOUT_S,
    interval_s: float = INTERVAL_S,
) -> T:
    """Poll ``check`` (plain or async) until it returns something truthy, and return that.

    Past ``timeout_s`` it raises `AssertionError` naming ``what`` and the last
    value seen. An exception raised by ``check`` ends the wait at once: a check
    asserts inside for a state that can no longer come.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        last = check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s (last seen: {last!r})")
        await asyncio.sleep(interval_s)


def eventually_blocking(
    check: Callable[[], T],
    what: str,
    *,
    timeout_s: float = TIMEOUT_S,
    interval_s: float = INTERVAL_S,
) -> T:
    """`eventually` for code with no event loop (a browser driver, a child process).

    Same outcomes: the first truthy value, or `AssertionError` naming ``what`` and the
    last value seen past ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s (last seen: {last!r})")
        time.sleep(interval_s)
