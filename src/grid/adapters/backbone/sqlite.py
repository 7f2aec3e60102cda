"""The embedded backbone: SQLite in WAL mode with ``synchronous=FULL``.

An ACK means the batch survives ``kill -9`` of the gateway, and with
``synchronous=FULL`` also a power loss: each batch is one transaction, and
`publish` returns its `Receipt` only after the commit, whose WAL append is
fsynced before COMMIT returns. All SQLite work happens in one dedicated thread,
so an fsync never blocks the event loop and the connection is never shared
between threads. Batch IDs are unique: publishing a batch ID again stores
nothing and returns a receipt marked ``duplicate``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar, cast

from grid.adapters.backbone import (
    BackboneUnavailable,
    PublishBatch,
    Receipt,
    Route,
    StoredRecord,
)

BACKBONE_FILE = "backbone.sqlite3"
PAGE_RECORDS = 500
BUSY_TIMEOUT_MS = 5000

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL UNIQUE,
    route TEXT NOT NULL CHECK (route IN ('events', 'inventory')),
    accepted INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_seq INTEGER NOT NULL REFERENCES batches(seq),
    record_id TEXT NOT NULL,
    encoded BLOB NOT NULL
);
"""

T = TypeVar("T")


def open_connection(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode with WAL and ``synchronous=FULL`` set and checked."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        conn.close()
        raise sqlite3.OperationalError(f"{path}: journal_mode is {mode}, WAL required")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


class SqliteBackbone:
    """A `Backbone` in one SQLite file, written by one dedicated thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grid-backbone")
        self._conn: sqlite3.Connection | None = None

    @classmethod
    async def open(cls, data_dir: Path) -> SqliteBackbone:
        """Open (creating if needed) the backbone file in ``data_dir``."""
        backbone = cls(data_dir / BACKBONE_FILE)
        try:
            await backbone._run(backbone._connect)
        except (OSError, sqlite3.Error) as exc:
            await backbone.close()
            raise BackboneUnavailable(f"cannot open {backbone.path.name}: {exc}") from exc
        return backbone

    def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = open_connection(self.path)
        conn.executescript(SCHEMA)
        self._conn = conn

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    async def publish(self, batch: PublishBatch) -> Receipt:
        """Commit ``batch`` in one transaction; return only after the commit."""
        try:
            return await self._run(self._write, batch)
        except (OSError, sqlite3.Error, RuntimeError) as exc:
            # RuntimeError: the executor was shut down by close().
            raise BackboneUnavailable(f"sqlite publish failed: {type(exc).__name__}") from exc

    def _write(self, batch: PublishBatch) -> Receipt:
        conn = self._require()
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(
                "SELECT accepted FROM batches WHERE batch_id = ?", (batch.batch_id,)
            ).fetchone()
            if row is not None:
                conn.execute("ROLLBACK")
                return Receipt(batch.batch_id, int(row[0]), duplicate=True)
            cursor = conn.execute(
                "INSERT INTO batches (batch_id, route, accepted) VALUES (?, ?, ?)",
                (batch.batch_id, batch.route, len(batch.records)),
            )
            conn.executemany(
                "INSERT INTO records (batch_seq, record_id, encoded) VALUES (?, ?, ?)",
                [(cursor.lastrowid, r.record_id, r.encoded) for r in batch.records],
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return Receipt(batch.batch_id, len(batch.records))

    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise sqlite3.OperationalError("backbone is closed")
        return self._conn

    async def records(self) -> AsyncIterator[tuple[str, Route, StoredRecord]]:
        """Every durably published record as ``(batch_id, route, record)``, in publish order."""
        after = 0
        while True:
            page = await self._run(self._page, after)
            for seq, batch_id, route, record_id, encoded in page:
                after = seq
                yield batch_id, cast(Route, route), StoredRecord(record_id, bytes(encoded))
            if len(page) < PAGE_RECORDS:
                return

    def _page(self, after: int) -> list[tuple[int, str, str, str, bytes]]:
        rows = (
            self._require()
            .execute(
                "SELECT r.seq, b.batch_id, b.route, r.record_id, r.encoded "
                "FROM records r JOIN batches b ON b.seq = r.batch_seq "
                "WHERE r.seq > ? ORDER BY r.seq LIMIT ?",
                (after, PAGE_RECORDS),
            )
            .fetchall()
        )
        return cast(list[tuple[int, str, str, str, bytes]], rows)

    async def pragma(self, name: str) -> object:
        """Read a PRAGMA on the writer connection, in its thread (for audits and tests)."""
        return await self._run(self._pragma, name)

    def _pragma(self, name: str) -> object:
        return self._require().execute(f"PRAGMA {name}").fetchone()[0]

    async def close(self) -> None:
        """Close the connection in its thread, then stop the thread."""
        if self._conn is not None:
            with contextlib.suppress(RuntimeError):
                await self._run(self._close_conn)
        self._executor.shutdown(wait=True)

    def _close_conn(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
