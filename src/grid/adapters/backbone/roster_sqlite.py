"""The embedded roster: an append-only SQLite table in the gateway's data dir.

Operators append with ``grid telemetry roster ...`` (another process); the
gateway replays the table in full before its listener opens, then `tail` polls
for revisions past the last one it saw. The poll is a primary-key range scan
that returns nothing almost always, so polling every 200 ms is cheap and a
change reaches admission well within the 1 s the CLI promises. Appends are
committed with WAL and ``synchronous=FULL`` before `append` returns.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar, cast

from grid.adapters.backbone import BackboneUnavailable, RosterEntry, RosterState
from grid.adapters.backbone.sqlite import open_connection
from grid.adapters.backbone.sqlite_thread import SqliteThread

ROSTER_FILE = "roster.sqlite3"
TAIL_POLL_INTERVAL_S = 0.2

SCHEMA = """
CREATE TABLE IF NOT EXISTS roster (
    revision INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id TEXT NOT NULL,
    tenant_id TEXT,
    state TEXT NOT NULL CHECK (state IN ('registered', 'admitted', 'suspended', 'revoked'))
);
"""

T = TypeVar("T")
Row = tuple[int, str, str | None, str]


class SqliteRosterLog:
    """A `RosterLog` in one SQLite file; all access from one dedicated thread."""

    def __init__(self, path: Path, poll_interval_s: float = TAIL_POLL_INTERVAL_S) -> None:
        self.path = path
        self.poll_interval_s = poll_interval_s
        self._db = SqliteThread("grid-roster", "roster")

    @classmethod
    async def open(
        cls, data_dir: Path, poll_interval_s: float = TAIL_POLL_INTERVAL_S
    ) -> SqliteRosterLog:
        """Open (creating if needed) the roster file in ``data_dir``."""
        log = cls(data_dir / ROSTER_FILE, poll_interval_s)
        await log._db.open(log._connect, log.path.name)
        return log

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = open_connection(self.path)
        conn.executescript(SCHEMA)
        return conn

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        try:
            return await self._db.run(fn, *args)
        except sqlite3.Error as exc:
            raise BackboneUnavailable(f"roster store failed: {type(exc).__name__}") from exc

    async def append(self, agent_id: str, state: RosterState, tenant_id: str | None) -> RosterEntry:
        """Append one entry in its own committed transaction; the table assigns the revision."""
        revision = await self._run(self._insert, agent_id, state, tenant_id)
        return RosterEntry(agent_id, tenant_id, state, revision)

    def _insert(self, agent_id: str, state: str, tenant_id: str | None) -> int:
        cursor = self._db.conn.execute(
            "INSERT INTO roster (agent_id, tenant_id, state) VALUES (?, ?, ?)",
            (agent_id, tenant_id, state),
        )
        return int(cast(int, cursor.lastrowid))

    async def replay(self) -> list[RosterEntry]:
        """Every entry, in revision order."""
        return [_entry(row) for row in await self._run(self._after, 0)]

    def _after(self, revision: int) -> list[Row]:
        rows = self._db.conn.execute(
            "SELECT revision, agent_id, tenant_id, state FROM roster "
            "WHERE revision > ? ORDER BY revision",
            (revision,),
        )
        return cast(list[Row], rows.fetchall())

    async def tail(self, after_revision: int) -> AsyncIterator[RosterEntry]:
        """Entries past ``after_revision`` as they are appended; runs until cancelled."""
        last = after_revision
        while True:
            for row in await self._run(self._after, last):
                last = row[0]
                yield _entry(row)
            await asyncio.sleep(self.poll_interval_s)

    async def close(self) -> None:
        """Close the connection in its thread, then stop the thread."""
        await self._db.close()


def _entry(row: Row) -> RosterEntry:
    revision, agent_id, tenant_id, state = row
    return RosterEntry(agent_id, tenant_id, cast(RosterState, state), revision)
