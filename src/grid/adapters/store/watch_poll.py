"""The one poll for other processes' writes, shared by every watcher of a SQLite store.

A watcher learns of its own process's writes at once (the store sets the kind's
event). Writes by another process (``grid store apply``, a second operator on
the same file) are found by reading the newest event of every watched kind once
per interval. `WatchPoll` runs that read in one task for the whole store, and
wakes only the kinds that have news; a quiet watcher is not scheduled at all
between its kind's changes. Before, each watcher woke every interval on a
timeout of its own and waited on the shared read: five quiet watchers of a demo
operator cost about 20 timer wake-ups, 40 task steps and 40 shield callbacks a
second, for nothing.

The task runs only while someone waits. A failed read wakes every waiting kind,
so that the watchers meet the store's failure in their own next read.

Most polls find nothing, and skip the read: every commit, in WAL mode, writes
the ``-wal`` file, so when the store file and its WAL show the same size, inode
and modification time as at the last read, nobody has written since. The
modification time is the kernel's coarse clock, so a write in the same tick as
the last look could leave it unchanged: a signature counts as settled only
when its newest time is `SETTLED_S` older than the moment it was taken (git's
rule for "racily clean" index entries); until then every poll reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from grid.errors import GridError

log = logging.getLogger(__name__)

Heads = tuple[dict[str, int], int, int]
"""Newest event version per kind, the store's head and its trim point."""

SETTLED_S = 0.1
"""How much older than the look itself a file's modification time must be for an
unchanged signature to prove that nobody wrote: far above the kernel's timestamp
tick (1 to 10 ms)."""


def file_signature(*paths: Path) -> tuple[int, ...] | None:
    """Size, inode and modification time of each file, or None when one is missing."""
    signature: list[int] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            return None
        signature += (st.st_size, st.st_ino, st.st_mtime_ns)
    return tuple(signature)


class WatchPoll:
    """Wakes a kind's watchers when the file holds events of it they have not read.

    ``read_heads(kinds)`` reads the `Heads` of ``kinds``; ``wake(kind)`` wakes
    that kind's watchers (they read the kind's events from where each stands).
    """

    def __init__(
        self,
        interval_s: float,
        read_heads: Callable[[tuple[str, ...]], Awaitable[Heads]],
        wake: Callable[[str], None],
        signature: Callable[[], tuple[int, ...] | None] = lambda: None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._interval_s = interval_s
        self._read_heads = read_heads
        self._wake = wake
        self._lasts: dict[str, dict[int, int]] = {}
        """Per kind, the version each waiting watcher has read up to."""
        self._tokens = itertools.count()
        self._signature = signature
        self._wall = wall
        self._settled: tuple[int, ...] | None = None
        """The files' signature at the last read, once settled (see `SETTLED_S`)."""
        self.reads = 0
        """Polls that read the heads (the others found the files unchanged)."""
        self.ticks = 0
        """Polls in all."""
        self._task: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def waiting(self, kind: str, last: int) -> Iterator[None]:
        """While inside, ``kind``'s watchers are woken once events after ``last`` exist."""
        token = next(self._tokens)
        self._lasts.setdefault(kind, {})[token] = last
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="sqlite-watch-poll")
        try:
            yield
        finally:
            lasts = self._lasts.get(kind)
            if lasts is not None:
                lasts.pop(token, None)
                if not lasts:
                    del self._lasts[kind]

    async def _run(self) -> None:
        while self._lasts:
            await asyncio.sleep(self._interval_s)
            kinds = tuple(sorted(self._lasts))
            if not kinds:
                return
            self.ticks += 1
            signature, looked = self._signature(), self._wall()
            if signature is not None and signature == self._settled:
                continue
            self.reads += 1
            try:
                newest, _head, compacted = await self._read_heads(kinds)
            except (GridError, OSError, sqlite3.Error):  # the watchers meet it in their read
                log.debug("watch poll failed", exc_info=True)
                self._settled = None
                for kind in kinds:
                    self._wake(kind)
                continue
            settled = signature is not None and max(signature[2::3]) < (looked - SETTLED_S) * 1e9
            self._settled = signature if settled else None
            for kind in kinds:
                lasts = self._lasts.get(kind)
                if not lasts:
                    continue
                behind = min(lasts.values())
                if newest.get(kind, 0) > behind or compacted > behind:
                    self._wake(kind)

    async def close(self) -> None:
        """Stop the poll (the store is closing)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
