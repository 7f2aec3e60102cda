"""The embedded backbone: SQLite in WAL mode with ``synchronous=FULL``.

An ACK means the batch survives ``kill -9`` of the gateway, and with
``synchronous=FULL`` also a power loss: each batch is ONE row (the stamped batch
bytes, as encoded once by the pipeline) written by ONE ``INSERT`` statement in
autocommit mode, i.e. its own transaction. `publish` returns its `Receipt` only
after that statement has committed, and a commit's WAL append is fsynced before
it returns. One statement per batch also means the writer thread releases and
re-acquires the GIL once per batch, not once per record, so it does not queue
behind the event loop for every record. All SQLite work happens in one
dedicated thread, so an fsync never blocks the event loop and the connection is
never shared between threads. Batch IDs are unique: publishing a batch ID again
stores nothing and returns a receipt marked ``duplicate``. Readers decode a
stored batch into its records (`records`); audits are rare, ingest is hot.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TypeVar, cast

from grid.adapters.backbone import (
    BackboneUnavailable,
    PublishBatch,
    Receipt,
    Route,
    StoredRecord,
    stored_records,
)
from grid.adapters.backbone.sqlite_thread import SqliteThread

BACKBONE_FILE = "backbone.sqlite3"
PAGE_BATCHES = 8
"""Batches per read page; a batch holds at most one request body (8 MiB by default)."""
BUSY_TIMEOUT_MS = 5000
LAYOUT_VERSION = 2
"""``PRAGMA user_version`` of this layout: one row per batch holding the stamped batch."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY,
    batch_id TEXT NOT NULL UNIQUE,
    route TEXT NOT NULL CHECK (route IN ('events', 'inventory')),
    accepted INTEGER NOT NULL,
    stamped BLOB NOT NULL
);
"""
INSERT = (
    "INSERT INTO batches (batch_id, route, accepted, stamped) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (batch_id) DO NOTHING"
)

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


def _ensure_layout(conn: sqlite3.Connection) -> None:
    """Create the one-row-per-batch layout, or refuse a file in another layout.

    Checked and created in one write transaction, so two processes opening a new
    file at once agree on what they found.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()
        if version == 0 and tables[0] == 0:
            conn.execute(SCHEMA)
            conn.execute(f"PRAGMA user_version={LAYOUT_VERSION}")
        elif version != LAYOUT_VERSION:
            raise sqlite3.DatabaseError(
                f"layout version {version} is not {LAYOUT_VERSION} (one row per stamped batch); "
                "read it with the release that wrote it, or start on a fresh data dir"
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class SqliteBackbone:
    """A `Backbone` in one SQLite file, written by one dedicated thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = SqliteThread("grid-backbone", "backbone")

    @classmethod
    async def open(cls, data_dir: Path) -> SqliteBackbone:
        """Open (creating if needed) the backbone file in ``data_dir``."""
        backbone = cls(data_dir / BACKBONE_FILE)
        try:
            await backbone._db.open(backbone._connect)
        except (OSError, sqlite3.Error) as exc:
            await backbone.close()
            raise BackboneUnavailable(f"cannot open {backbone.path.name}: {exc}") from exc
        return backbone

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = open_connection(self.path)
        try:
            _ensure_layout(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    async def publish(self, batch: PublishBatch) -> Receipt:
        """Commit ``batch`` in one transaction; return only after the commit."""
        try:
            return await self._db.run(self._write, batch)
        except (OSError, sqlite3.Error, RuntimeError) as exc:
            # RuntimeError: the executor was shut down by close().
            raise BackboneUnavailable(f"sqlite publish failed: {type(exc).__name__}") from exc

    def _write(self, batch: PublishBatch) -> Receipt:
        # Autocommit: this one statement is the batch's whole transaction, committed
        # (WAL fsynced, synchronous=FULL) before execute returns.
        conn = self._db.conn
        cursor = conn.execute(INSERT, (batch.batch_id, batch.route, batch.accepted, batch.stamped))
        if cursor.rowcount == 1:
            return Receipt(batch.batch_id, batch.accepted)
        row = conn.execute(
            "SELECT accepted FROM batches WHERE batch_id = ?", (batch.batch_id,)
        ).fetchone()
        if row is None:
            raise sqlite3.OperationalError("batch neither stored nor found")
        return Receipt(batch.batch_id, int(row[0]), duplicate=True)

    async def batches(self) -> AsyncIterator[tuple[str, Route, bytes]]:
        """Every durably published batch as ``(batch_id, route, stamped bytes)``, in order."""
        after = 0
        while True:
            page = await self._db.run(self._page, after)
            for seq, batch_id, route, stamped in page:
                after = seq
                yield batch_id, cast(Route, route), bytes(stamped)
            if len(page) < PAGE_BATCHES:
                return

    async def records(self) -> AsyncIterator[tuple[str, Route, StoredRecord]]:
        """Every durably published record as ``(batch_id, route, record)``, in publish order."""
        async for batch_id, route, stamped in self.batches():
            for record in stored_records(route, stamped):
                yield batch_id, route, record

    def _page(self, after: int) -> list[tuple[int, str, str, bytes]]:
        rows = self._db.conn.execute(
            "SELECT seq, batch_id, route, stamped FROM batches WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, PAGE_BATCHES),
        ).fetchall()
        return cast(list[tuple[int, str, str, bytes]], rows)

    async def pragma(self, name: str) -> object:
        """Read a PRAGMA on the writer connection, in its thread (for audits and tests)."""
        return await self._db.run(self._pragma, name)

    def _pragma(self, name: str) -> object:
        return self._db.conn.execute(f"PRAGMA {name}").fetchone()[0]

    async def close(self) -> None:
        """Close the connection in its thread, then stop the thread."""
        await self._db.close()
