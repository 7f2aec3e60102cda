"""The SQLite store's event log: what watchers resume from, bounded by count and by bytes.

Every write appends its event, the whole object as written, so that a watcher
that comes back with an older resource version gets every change since. The log
is trimmed from its oldest end, in steps so that trimming is amortized:

- by count, past `EVENT_LOG_RETENTION` events plus a tenth;
- by size, past ``bytes_max`` of event bodies summed (`EVENT_LOG_BYTES`). An
  operator replacing a megabyte overlay ConfigMap every round would otherwise
  keep ten thousand copies of it, ten gigabytes, before the count ever trimmed.
  A size trim goes down to nine tenths of the bound.

What was trimmed is recorded as ``compacted_through``; a watch resuming at or
before it is `Expired` and re-lists, as a Kubernetes watch does on 410 Gone. The
summed size lives in the ``meta`` table (``event_bytes``, in characters of the
JSON bodies), kept in the same transaction as every insert and trim.
"""

from __future__ import annotations

import sqlite3

EVENT_LOG_RETENTION = 10_000
"""Events kept for watch resumption. Older resumes raise `Expired` (the caller
re-lists). More retention costs disk; less forces re-lists after long pauses."""

EVENT_LOG_BYTES = 64 * 1024 * 1024
"""Event bodies kept at most, summed. Past it the oldest events go, however few:
more keeps history longer for large objects; less bounds the file tighter."""


def _meta(conn: sqlite3.Connection, key: str) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return int(row[0])


def open_log(conn: sqlite3.Connection) -> None:
    """Make sure the log's bookkeeping exists (inside the opening transaction)."""
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('compacted_through', 0)")
    if conn.execute("SELECT 1 FROM meta WHERE key='event_bytes'").fetchone() is None:
        # A file written before the size was kept: count what it holds once.
        held = conn.execute("SELECT COALESCE(SUM(length(body)), 0) FROM events").fetchone()[0]
        conn.execute("INSERT INTO meta VALUES ('event_bytes', ?)", (int(held),))


def append(
    conn: sqlite3.Connection,
    rv: int,
    kind: str,
    event_type: str,
    body: str,
    *,
    retention: int,
    bytes_max: int,
) -> None:
    """Log one event (inside the write's transaction), then trim what is past the bounds."""
    conn.execute("INSERT INTO events VALUES (?, ?, ?, ?)", (rv, kind, event_type, body))
    held = _meta(conn, "event_bytes") + len(body)
    through = _meta(conn, "compacted_through")
    new_through = through
    if rv - through > retention + max(1, retention // 10):
        new_through = rv - retention
    if held > bytes_max:
        new_through = max(new_through, _size_cut(conn, new_through, held, bytes_max))
    if new_through != through:
        dropped = conn.execute(
            "SELECT COALESCE(SUM(length(body)), 0) FROM events WHERE resource_version <= ?",
            (new_through,),
        ).fetchone()[0]
        conn.execute("DELETE FROM events WHERE resource_version <= ?", (new_through,))
        conn.execute("UPDATE meta SET value=? WHERE key='compacted_through'", (new_through,))
        held -= int(dropped)
    conn.execute("UPDATE meta SET value=? WHERE key='event_bytes'", (held,))


def _size_cut(conn: sqlite3.Connection, after: int, held: int, bytes_max: int) -> int:
    """The newest version to trim through so that the log is back to 9/10 of ``bytes_max``.

    The newest event always stays, however large it is."""
    target = held - bytes_max * 9 // 10
    freed, cut = 0, after
    rows = conn.execute(
        "SELECT resource_version, length(body) FROM events "
        "WHERE resource_version > ? ORDER BY resource_version",
        (after,),
    )
    for rv, size in rows:
        if freed >= target:
            break
        freed += int(size)
        cut = rv
    newest = conn.execute("SELECT MAX(resource_version) FROM events").fetchone()[0]
    return min(cut, int(newest) - 1)
