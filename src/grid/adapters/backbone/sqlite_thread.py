"""One SQLite connection owned by one dedicated thread.

The embedded backbone and roster each keep a single connection that only its own
thread touches: every call is shipped there with ``run_in_executor``, so fsync
never blocks the event loop and the connection needs no locking.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from grid.core.telemetry.refusals import BackboneUnavailable

T = TypeVar("T")


class SqliteThread:
    """A connection and the one thread allowed to use it."""

    def __init__(self, thread_name: str, what: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self._what = what
        self._conn: sqlite3.Connection | None = None

    async def open(self, connect: Callable[[], sqlite3.Connection], file_name: str) -> None:
        """Create the connection in the thread with ``connect``.

        A file that cannot be opened stops the thread and raises `BackboneUnavailable`
        naming ``file_name``, the one refusal both the backbone and the roster give.
        """
        try:
            self._conn = await self.run(connect)
        except (OSError, sqlite3.Error) as exc:
            await self.close()
            raise BackboneUnavailable(f"cannot open {file_name}: {exc}") from exc

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn(*args)`` in the connection's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def submit(self, fn: Callable[[], object]) -> None:
        """Queue ``fn()`` in the connection's thread without waiting for it.

        Raises `RuntimeError` once the thread is stopped.
        """
        self._executor.submit(fn)

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection; only for code already running in the thread."""
        if self._conn is None:
            raise sqlite3.OperationalError(f"{self._what} is closed")
        return self._conn

    async def close(self) -> None:
        """Close the connection in its thread, then stop the thread."""
        if self._conn is not None:
            with contextlib.suppress(RuntimeError):
                await self.run(self._close_conn)
        self._executor.shutdown(wait=True)

    def _close_conn(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
