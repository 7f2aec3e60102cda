"""The embedded backbone: SQLite in WAL mode with ``synchronous=FULL``.

An ACK means the batch survives ``kill -9`` of the gateway, and with
``synchronous=FULL`` also a power loss: each batch is ONE row (the stamped batch
bytes, as encoded once by the pipeline), and `publish` returns its `Receipt`
only after the transaction holding that row has committed; a commit's WAL
append is fsynced before it returns.

Group commit: batches that arrive while a commit is in progress wait for it to
finish and are then committed together by the writer thread, in one transaction
with one fsync (at most `GROUP_BATCHES_MAX` at a time); the thread picks them up
itself, without a round trip through the event loop. A lone batch is one autocommit ``INSERT``.
So under concurrency the fsync cost is shared instead of paid per batch, which
is what bounds a one-commit-per-batch writer on disks with slow fsync, and no
batch waits longer than the commit before it. Each receipt still comes only
after its own row is durable. If a group's transaction fails, each of its
batches is retried alone, so one bad batch cannot refuse its neighbours.

All SQLite work happens in one dedicated thread, so an fsync never blocks the
event loop and the connection is never shared between threads. Batch IDs are
unique: publishing a batch ID again stores nothing and returns a receipt marked
``duplicate``. Readers decode a stored batch into its records (`records`);
audits are rare, ingest is hot.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
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
GROUP_BATCHES_MAX = 64
"""Most batches committed in one transaction (bytes are already bounded by the
gateway's held-body capacity)."""
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


@dataclass(frozen=True)
class _Waiting:
    """A batch waiting for the writer thread, and where its receipt goes."""

    batch: PublishBatch
    receipt: asyncio.Future[Receipt]


def _unavailable(exc: Exception) -> BackboneUnavailable:
    """The failure a publisher hears when its batch was not committed."""
    return BackboneUnavailable(f"sqlite publish failed: {type(exc).__name__}")


def _settle(group: list[_Waiting], outcomes: list[Receipt | BackboneUnavailable]) -> None:
    """On the event loop: hand each waiting publisher its receipt or its failure."""
    for waiting, outcome in zip(group, outcomes, strict=True):
        if waiting.receipt.done():
            continue  # the publisher gave up (its budget ran out); its row may exist
        if isinstance(outcome, Receipt):
            waiting.receipt.set_result(outcome)
        else:
            waiting.receipt.set_exception(outcome)


class SqliteBackbone:
    """A `Backbone` in one SQLite file, written by one dedicated thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = SqliteThread("grid-backbone", "backbone")
        self._waiting: deque[_Waiting] = deque()
        self._lock = threading.Lock()
        self._draining = False
        """Whether the writer thread has a `_commit_waiting` run queued or under way."""

    @classmethod
    async def open(cls, data_dir: Path) -> SqliteBackbone:
        """Open (creating if needed) the backbone file in ``data_dir``."""
        backbone = cls(data_dir / BACKBONE_FILE)
        await backbone._db.open(backbone._connect, backbone.path.name)
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
        """Commit ``batch`` (alone or with others waiting); return only after the commit."""
        receipt: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(batch, receipt))
        with self._lock:
            start, self._draining = not self._draining, True
        if start:
            try:
                self._db.submit(self._commit_waiting)
            except RuntimeError:  # the thread was stopped by close()
                self._fail_waiting("the backbone is closed")
        return await receipt

    def _fail_waiting(self, reason: str) -> None:
        """On the event loop, after close: every waiting publisher gets a failure."""
        with self._lock:
            group = list(self._waiting)
            self._waiting.clear()
            self._draining = False
        _settle(group, [BackboneUnavailable(reason) for _ in group])

    def _commit_waiting(self) -> None:
        """In the thread: commit waiting batches, a group per transaction, until none wait.

        Each group's publishers are woken once, together, after its commit.
        """
        while True:
            with self._lock:
                if not self._waiting:
                    self._draining = False
                    return
                group = [
                    self._waiting.popleft()
                    for _ in range(min(len(self._waiting), GROUP_BATCHES_MAX))
                ]
            try:
                outcomes = self._write_group([waiting.batch for waiting in group])
            except Exception as exc:
                outcomes = [_unavailable(exc) for _ in group]
            with contextlib.suppress(RuntimeError):  # the event loop is already closed
                group[0].receipt.get_loop().call_soon_threadsafe(_settle, group, outcomes)

    def _write_group(self, batches: list[PublishBatch]) -> list[Receipt | BackboneUnavailable]:
        """In the thread: one transaction for the group, or one per batch if that fails."""
        conn = self._db.conn
        if len(batches) > 1:
            conn.execute("BEGIN IMMEDIATE")
            try:
                receipts: list[Receipt | BackboneUnavailable] = [
                    self._insert(conn, batch) for batch in batches
                ]
                conn.execute("COMMIT")  # WAL fsynced (synchronous=FULL) before it returns
                return receipts
            except sqlite3.Error:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        return [self._write_alone(conn, batch) for batch in batches]

    def _write_alone(
        self, conn: sqlite3.Connection, batch: PublishBatch
    ) -> Receipt | BackboneUnavailable:
        # Autocommit: this one statement is the batch's whole transaction, committed
        # (WAL fsynced, synchronous=FULL) before execute returns.
        try:
            return self._insert(conn, batch)
        except sqlite3.Error as exc:
            return _unavailable(exc)

    @staticmethod
    def _insert(conn: sqlite3.Connection, batch: PublishBatch) -> Receipt:
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
        """Close the connection in its thread (after the commits under way), stop the thread."""
        await self._db.close()
