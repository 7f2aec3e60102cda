"""The embedded `ResourceStore`: one SQLite file in WAL mode, shared by processes.

Layout: ``objects`` holds the current object per (kind, namespace, name);
``events`` is the ordered event log keyed by resourceVersion; ``meta`` holds the
store-wide resourceVersion counter and how far the log has been trimmed. Every
write is one ``BEGIN IMMEDIATE`` transaction that takes the next resourceVersion,
updates ``objects`` and appends to ``events`` together. SQLite admits one writer
at a time, so commits happen in resourceVersion order and a watcher never sees a
gap, even with several processes (an operator and `grid apply`) on one file.

Threading choice: each store owns a dedicated single worker thread that owns the
SQLite connection, and every operation is a short synchronous transaction run
there via ``run_in_executor``. The event loop never blocks on disk, and since one
thread owns the connection it needs no locking of its own. ``synchronous=FULL``
makes a returned write survive a power cut as well as a process crash.

Watchers are woken at once by writes of their kind from their own process, and
look for writes from other processes every `WATCH_POLL_INTERVAL_S`: one query per
interval for every watcher of the store together (the newest event of each
watched kind), in one task (`grid.adapters.store.watch_poll`), so a watcher is
woken, and runs its own query, only when its kind has news.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sqlite3
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from grid.adapters.store import event_log, objects
from grid.adapters.store.encoded import dumps_object
from grid.adapters.store.event_log import EVENT_LOG_BYTES, EVENT_LOG_RETENTION
from grid.adapters.store.parsed_copies import ParsedCopies
from grid.adapters.store.port import EventType, Expired, LabelSelector, Obj, WatchEvent
from grid.adapters.store.watch_poll import Heads, WatchPoll, file_signature
from grid.adapters.tracing import status_write_span
from grid.errors import AlreadyExists, GridError, NotFound

SCHEMA_VERSION = 1
WATCH_POLL_INTERVAL_S = 0.25
"""How often a watcher checks the file for writes by other processes. Lower is
fresher but costs one indexed query per watcher per interval."""
WATCH_BATCH_EVENTS = 500
"""Most events read per watch query; bounds memory while catching up."""
PAGE_SIZE_BYTES = 16_384
"""The page size of a new store file (an existing file keeps its own)."""
BUSY_TIMEOUT_MS = 5_000
"""How long a write waits for another process's write lock before failing."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS objects (
    kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    resource_version INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (kind, namespace, name)
);
CREATE TABLE IF NOT EXISTS events (
    resource_version INTEGER PRIMARY KEY, kind TEXT NOT NULL,
    type TEXT NOT NULL, body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_kind ON events (kind, resource_version);
"""

T = TypeVar("T")
_Write = tuple[EventType, Obj]
_Objs = list[Obj]  # aliases: inside the class, `list` names the method
_Events = list[WatchEvent]


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _dumps(obj: Obj) -> str:
    return dumps_object(obj)  # json.dumps, splicing in what `EncodedText` values carry


class SqliteStore:
    """A `ResourceStore` in one SQLite file. Create it with `SqliteStore.open`."""

    def __init__(
        self,
        path: Path,
        executor: ThreadPoolExecutor,
        conn: sqlite3.Connection,
        *,
        now: Callable[[], dt.datetime],
        event_log_retention: int,
        watch_poll_interval_s: float,
        event_log_bytes: int = EVENT_LOG_BYTES,
    ) -> None:
        self.path = path
        self._executor = executor
        self._conn = conn
        self._now = now
        self._retention = event_log_retention
        self._log_bytes = event_log_bytes
        self._changed: dict[str, asyncio.Event] = {}
        self._watched: Counter[str] = Counter()
        self._poll = WatchPoll(
            watch_poll_interval_s,
            self._read_heads,
            self._wake,
            signature=lambda: file_signature(path, Path(f"{path}-wal")),
        )
        self._closed = False
        self.parsed = ParsedCopies()
        """Large objects as last written, so the next write need not parse them."""

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        now: Callable[[], dt.datetime] = _utc_now,
        event_log_retention: int = EVENT_LOG_RETENTION,
        watch_poll_interval_s: float = WATCH_POLL_INTERVAL_S,
        event_log_bytes: int = EVENT_LOG_BYTES,
    ) -> SqliteStore:
        """Open (creating if needed) the store file and its worker thread."""
        file = Path(path)
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grid-store")
        loop = asyncio.get_running_loop()
        try:
            conn = await loop.run_in_executor(executor, _connect, file)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(
            file,
            executor,
            conn,
            now=now,
            event_log_retention=event_log_retention,
            watch_poll_interval_s=watch_poll_interval_s,
            event_log_bytes=event_log_bytes,
        )

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise GridError("the store is closed", code="store_closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- reads ---------------------------------------------------------------

    async def get(self, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        """The object, or `NotFound`."""
        info = objects.stored_kind(kind)
        ns = objects.resolve_namespace(info, namespace)
        found = await self._run(self._get_sync, kind, ns, name)
        if found is None:
            raise NotFound(f"{kind} {name!r} not found")
        return found

    def _get_sync(self, kind: str, ns: str, name: str) -> Obj | None:
        row = self._conn.execute(
            "SELECT body FROM objects WHERE kind=? AND namespace=? AND name=?", (kind, ns, name)
        ).fetchone()
        return None if row is None else json.loads(row[0])

    async def list(
        self,
        kind: str,
        label_selector: LabelSelector | None = None,
        *,
        namespace: str | None = None,
    ) -> list[Obj]:
        """Objects of a kind matching the selector, ordered by (namespace, name)."""
        ns, requirements = objects.list_query(kind, label_selector, namespace)
        found, _rv = await self._run(self._list_sync, kind, ns)
        return [obj for obj in found if objects.matches(obj, requirements)]

    def _list_sync(self, kind: str, ns: str | None) -> tuple[_Objs, int]:
        conn = self._conn
        conn.execute("BEGIN")
        try:
            rv = _meta(conn, "resource_version")
            if ns is None:
                rows = conn.execute(
                    "SELECT body FROM objects WHERE kind=? ORDER BY namespace, name", (kind,)
                ).fetchall()
            else:
                rows = conn.execute(
                    "SELECT body FROM objects WHERE kind=? AND namespace=? ORDER BY name",
                    (kind, ns),
                ).fetchall()
        finally:
            conn.execute("COMMIT")
        return [json.loads(r[0]) for r in rows], rv

    # -- writes --------------------------------------------------------------

    async def _write(self, kind: str, ns: str, name: str, change: Callable[..., Any]) -> Obj:
        result: Obj = await self._run(self._write_sync, kind, ns, name, change)
        self._wake(kind)
        return result

    def _wake(self, kind: str) -> None:
        """Wake ``kind``'s watchers: they read its events from where each stands."""
        changed = self._changed.pop(kind, None)
        if changed is not None:
            changed.set()

    def _write_sync(
        self, kind: str, ns: str, name: str, change: Callable[[Obj | None, int], _Write | Obj]
    ) -> Obj:
        """One write transaction: ``change(current, next_rv)`` returns the event to
        record, or the unchanged current object when there is nothing to write."""
        conn = self._conn
        key = (kind, ns, name)
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = self._current(key)
            rv = _meta(conn, "resource_version") + 1
            outcome = change(current, rv)
            if not isinstance(outcome, tuple):
                conn.execute("ROLLBACK")
                return outcome
            event_type, stored = outcome
            body = _dumps(stored)  # one serialisation for the object and its event
            if event_type is EventType.DELETED:
                self.parsed.forget(key)
                conn.execute(
                    "DELETE FROM objects WHERE kind=? AND namespace=? AND name=?", (kind, ns, name)
                )
            else:
                self.parsed.put(key, rv, stored, len(body))
                conn.execute(
                    "INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?)",
                    (kind, ns, name, rv, body),
                )
            event_log.append(
                conn,
                rv,
                kind,
                event_type.value,
                body,
                retention=self._retention,
                bytes_max=self._log_bytes,
            )
            conn.execute("UPDATE meta SET value=? WHERE key='resource_version'", (rv,))
            conn.execute("COMMIT")
            return stored
        except BaseException:
            self.parsed.forget(key)
            conn.execute("ROLLBACK")
            raise

    def _current(self, key: tuple[str, str, str]) -> Obj | None:
        """The stored object at ``key`` (inside a write), from a kept copy when one is current."""
        where = "FROM objects WHERE kind=? AND namespace=? AND name=?"
        row = self._conn.execute(f"SELECT resource_version {where}", key).fetchone()
        if row is None:
            return None
        kept = self.parsed.get(key, row[0])
        if kept is not None:
            return kept
        current: Obj = json.loads(self._conn.execute(f"SELECT body {where}", key).fetchone()[0])
        return current

    async def create(self, obj: Obj) -> Obj:
        """Store a new object; `AlreadyExists` on a taken name."""
        info, ns, name = objects.identify(obj)
        uid, now = str(uuid.uuid4()), objects.format_timestamp(self._now())

        def change(current: Obj | None, rv: int) -> _Write:
            if current is not None:
                raise AlreadyExists(f"{info.kind} {name!r} already exists")
            return EventType.ADDED, objects.prepare_create(
                obj, resource_version=rv, uid=uid, now=now
            )

        return await self._write(info.kind, ns, name, change)

    async def replace(self, obj: Obj) -> Obj:
        """Replace desired state; `Conflict` on a stale resourceVersion."""
        info, ns, name = objects.identify(obj)

        def change(current: Obj | None, rv: int) -> _Write | Obj:
            if current is None:
                raise NotFound(f"{info.kind} {name!r} not found")
            stored = objects.prepare_replace(current, obj, resource_version=rv)
            return current if stored is None else (EventType.MODIFIED, stored)

        return await self._write(info.kind, ns, name, change)

    async def patch_status(
        self,
        kind: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
        *,
        namespace: str | None = None,
    ) -> Obj:
        """Merge-patch the status; optimistic when ``resource_version`` is given."""
        ns = objects.resolve_namespace(objects.stored_kind(kind), namespace)

        def change(current: Obj | None, rv: int) -> _Write | Obj:
            if current is None:
                raise NotFound(f"{kind} {name!r} not found")
            stored = objects.prepare_patch_status(
                current, status, precondition=resource_version, resource_version=rv
            )
            return current if stored is None else (EventType.MODIFIED, stored)

        with status_write_span(kind, name, status):
            return await self._write(kind, ns, name, change)

    async def delete(self, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        """Remove an object and return its last state."""
        ns = objects.resolve_namespace(objects.stored_kind(kind), namespace)

        def change(current: Obj | None, rv: int) -> _Write:
            if current is None:
                raise NotFound(f"{kind} {name!r} not found")
            return EventType.DELETED, objects.prepare_delete(current, resource_version=rv)

        return await self._write(kind, ns, name, change)

    # -- watch ---------------------------------------------------------------

    def watch(
        self, kind: str, since_resource_version: str | None = None
    ) -> AsyncIterator[WatchEvent]:
        """Ordered changes to a kind (see `ResourceStore.watch`)."""
        objects.stored_kind(kind)
        return self._watch(kind, since_resource_version)

    async def _watch(self, kind: str, since: str | None) -> AsyncIterator[WatchEvent]:
        self._watched[kind] += 1
        try:
            if since is None:
                snapshot, last = await self._run(self._list_sync, kind, None)
                for obj in snapshot:
                    yield WatchEvent(EventType.ADDED, obj, obj["metadata"]["resourceVersion"])
            else:
                last = int(since)
            while not self._closed:
                changed = self._changed.setdefault(kind, asyncio.Event())
                events, head, compacted = await self._run(self._events_sync, kind, last)
                if last < compacted:
                    raise Expired(
                        f"resourceVersion {last} is older than the event log "
                        f"(compacted through {compacted})"
                    )
                for event in events:
                    yield event
                if events:
                    last = int(events[-1].resource_version)
                    if len(events) == WATCH_BATCH_EVENTS:
                        continue
                # Even after events: a write since ``changed`` was taken has set it.
                last = await self._quiet(kind, changed, max(last, head))
        finally:
            self._watched[kind] -= 1
            if self._watched[kind] <= 0:
                del self._watched[kind]

    async def _quiet(self, kind: str, changed: asyncio.Event, last: int) -> int:
        """Wait until ``kind`` may have events after ``last``: a write of it from this
        process, or the shared poll finding one (or a trim past ``last``)."""
        with self._poll.waiting(kind, last):
            await changed.wait()
        return last

    async def _read_heads(self, kinds: tuple[str, ...]) -> Heads:
        """The heads of ``kinds``, for the shared poll (`WatchPoll`)."""
        return await self._run(self._heads_sync, kinds)

    def _heads_sync(self, kinds: tuple[str, ...]) -> Heads:
        conn = self._conn
        conn.execute("BEGIN")
        try:
            head = _meta(conn, "resource_version")
            compacted = _meta(conn, "compacted_through")
            newest = {
                kind: int(
                    conn.execute(
                        "SELECT MAX(resource_version) FROM events WHERE kind=?", (kind,)
                    ).fetchone()[0]
                    or 0
                )
                for kind in kinds
            }
        finally:
            conn.execute("COMMIT")
        return newest, head, compacted

    def _events_sync(self, kind: str, after: int) -> tuple[_Events, int, int]:
        """Events of a kind after a version, plus the store head and trim point,
        read in one transaction so that "no events up to head" is consistent."""
        conn = self._conn
        conn.execute("BEGIN")
        try:
            head = _meta(conn, "resource_version")
            compacted = _meta(conn, "compacted_through")
            rows = conn.execute(
                "SELECT resource_version, type, body FROM events "
                "WHERE kind=? AND resource_version>? ORDER BY resource_version LIMIT ?",
                (kind, after, WATCH_BATCH_EVENTS),
            ).fetchall()
        finally:
            conn.execute("COMMIT")
        events = [WatchEvent(EventType(t), json.loads(body), str(rv)) for rv, t, body in rows]
        if len(events) == WATCH_BATCH_EVENTS:
            head = int(events[-1].resource_version)
        return events, head, compacted

    async def close(self) -> None:
        """Close the connection and worker thread; open watches end."""
        if self._closed:
            return
        self._closed = True
        for changed in self._changed.values():
            changed.set()
        await self._poll.close()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._conn.close)
        self._executor.shutdown(wait=False)


def _meta(conn: sqlite3.Connection, key: str) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return int(row[0])


def _connect(path: Path) -> sqlite3.Connection:
    """Open the file in WAL mode and create or check the schema (runs on the worker)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        # Effective only for a new file: 16 KiB pages halve the CPU of writing a
        # megabyte body (an overlay ConfigMap) against the default 4 KiB.
        conn.execute(f"PRAGMA page_size={PAGE_SIZE_BYTES}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("BEGIN IMMEDIATE")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        for key, value in (("schema_version", SCHEMA_VERSION), ("resource_version", 0)):
            conn.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (key, value))
        event_log.open_log(conn)
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise GridError(f"cannot open store {path}: {exc}", code="store_unavailable") from exc
    version = _meta(conn, "schema_version")
    if version != SCHEMA_VERSION:
        conn.close()
        raise GridError(
            f"store {path} has schema version {version}, this build reads {SCHEMA_VERSION}",
            code="store_unavailable",
        )
    return conn
