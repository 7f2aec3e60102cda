"""The shutdown signals every long-running command answers: SIGTERM and SIGINT.

A Kubernetes pod is stopped with SIGTERM and a terminal with SIGINT; both end a
command the same way, by setting one event its serving loop waits on.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_event() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (where the loop supports signal handlers)."""
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, event.set)
    return event
