"""An in-memory `ResourceStore` for controller tests.

It implements the same port, with the same object bookkeeping
(`grid.adapters.store.objects`), as the SQLite store, and the same contract test
suite runs against both. It lives for one event loop and keeps nothing on disk.
Its event log is trimmed like the SQLite one, so `Expired` is testable too.
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from grid.adapters.store import objects
from grid.adapters.store.event_log import EVENT_LOG_RETENTION
from grid.adapters.store.port import EventType, Expired, LabelSelector, Obj, WatchEvent
from grid.errors import AlreadyExists, GridError, NotFound

_Key = tuple[str, str, str]


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class InMemoryStore:
    """A `ResourceStore` held in dicts, with an in-memory ordered event log."""

    def __init__(
        self,
        *,
        now: Callable[[], dt.datetime] = _utc_now,
        event_log_retention: int = EVENT_LOG_RETENTION,
    ) -> None:
        self._now = now
        self._retention = event_log_retention
        self._objects: dict[_Key, Obj] = {}
        self._log: list[tuple[int, str, WatchEvent]] = []
        self._compacted_through = 0
        self._rv = 0
        self._changed: asyncio.Event | None = None
        self._closed = False

    # -- reads ---------------------------------------------------------------

    async def get(self, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        """The object, or `NotFound`."""
        info = objects.stored_kind(kind)
        key = (kind, objects.resolve_namespace(info, namespace), name)
        found = self._objects.get(key)
        if found is None:
            raise NotFound(f"{kind} {name!r} not found")
        return copy.deepcopy(found)

    async def list(
        self,
        kind: str,
        label_selector: LabelSelector | None = None,
        *,
        namespace: str | None = None,
    ) -> list[Obj]:
        """Objects of a kind matching the selector, ordered by (namespace, name)."""
        ns, requirements = objects.list_query(kind, label_selector, namespace)
        found = [
            copy.deepcopy(obj)
            for (k, n, _), obj in sorted(self._objects.items())
            if k == kind and (ns is None or n == ns) and objects.matches(obj, requirements)
        ]
        return found

    # -- writes --------------------------------------------------------------

    def _record(self, event_type: EventType, obj: Obj) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        event = WatchEvent(event_type, copy.deepcopy(obj), str(rv))
        self._log.append((rv, obj["kind"], event))
        self._rv = rv
        if len(self._log) > self._retention:
            dropped = self._log[: len(self._log) - self._retention]
            self._compacted_through = dropped[-1][0]
            del self._log[: len(dropped)]
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _check_open(self) -> None:
        if self._closed:
            raise GridError("the store is closed", code="store_closed")

    async def create(self, obj: Obj) -> Obj:
        """Store a new object; `AlreadyExists` on a taken name."""
        self._check_open()
        stored = objects.prepare_create(
            obj,
            resource_version=self._rv + 1,
            uid=str(uuid.uuid4()),
            now=objects.format_timestamp(self._now()),
        )
        key = (stored["kind"], stored["metadata"].get("namespace", ""), stored["metadata"]["name"])
        if key in self._objects:
            raise AlreadyExists(f"{key[0]} {key[2]!r} already exists")
        self._objects[key] = stored
        self._record(EventType.ADDED, stored)
        return copy.deepcopy(stored)

    def _current(self, kind: str, name: str, namespace: str | None) -> tuple[_Key, Obj]:
        info = objects.stored_kind(kind)
        key = (kind, objects.resolve_namespace(info, namespace), name)
        found = self._objects.get(key)
        if found is None:
            raise NotFound(f"{kind} {name!r} not found")
        return key, found

    async def replace(self, obj: Obj) -> Obj:
        """Replace desired state; `Conflict` on a stale resourceVersion."""
        self._check_open()
        info, namespace, name = objects.identify(obj)
        key, current = self._current(info.kind, name, namespace or None)
        stored = objects.prepare_replace(current, obj, resource_version=self._rv + 1)
        if stored is None:
            return copy.deepcopy(current)
        self._objects[key] = stored
        self._record(EventType.MODIFIED, stored)
        return copy.deepcopy(stored)

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
        self._check_open()
        key, current = self._current(kind, name, namespace)
        stored = objects.prepare_patch_status(
            current, status, precondition=resource_version, resource_version=self._rv + 1
        )
        if stored is None:
            return copy.deepcopy(current)
        self._objects[key] = stored
        self._record(EventType.MODIFIED, stored)
        return copy.deepcopy(stored)

    async def delete(self, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        """Remove an object and return its last state."""
        self._check_open()
        key, current = self._current(kind, name, namespace)
        stored = objects.prepare_delete(current, resource_version=self._rv + 1)
        del self._objects[key]
        self._record(EventType.DELETED, stored)
        return copy.deepcopy(stored)

    # -- watch ---------------------------------------------------------------

    def watch(
        self, kind: str, since_resource_version: str | None = None
    ) -> AsyncIterator[WatchEvent]:
        """Ordered changes to a kind (see `ResourceStore.watch`)."""
        objects.stored_kind(kind)
        return self._watch(kind, since_resource_version)

    async def _watch(self, kind: str, since: str | None) -> AsyncIterator[WatchEvent]:
        if since is None:
            last = self._rv
            snapshot = await self.list(kind)
            for obj in snapshot:
                yield WatchEvent(EventType.ADDED, obj, obj["metadata"]["resourceVersion"])
        else:
            last = int(since)
        while not self._closed:
            if last < self._compacted_through:
                raise Expired(
                    f"resourceVersion {last} is older than the event log "
                    f"(compacted through {self._compacted_through})"
                )
            start = bisect.bisect_right(self._log, last, key=lambda entry: entry[0])
            pending = self._log[start:]
            if pending:
                last = pending[-1][0]
                for _rv, event_kind, event in pending:
                    if event_kind == kind:
                        yield WatchEvent(
                            event.type, copy.deepcopy(event.object), event.resource_version
                        )
                continue
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()

    async def close(self) -> None:
        """End open watches; later writes raise."""
        self._closed = True
        if self._changed is not None:
            self._changed.set()
            self._changed = None
