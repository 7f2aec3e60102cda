"""Parsed copies of the large objects a SQLite store wrote last.

An operator replaces its overlay ConfigMap (about a megabyte of JSON text at a
thousand providers) on every round that changed it, and each replace reads the
stored object back to compare and carry its metadata and status. Parsing that
body again cost more than the rest of the write. `ParsedCopies` keeps, for the
few objects whose body is large, the object as last written together with its
resource version. A write whose row still holds that version takes a copy of it
instead of parsing; any other write, by this process or another one sharing the
file, has moved the version on, so a stale copy is never used.

Copies are plain deep copies of the JSON data (`grid.adapters.store.objects.json_copy`):
neither the store's caller nor its change function can alter what is kept. A
large body is mostly long strings (a ConfigMap's data), which a copy shares.
"""

from __future__ import annotations

from grid.adapters.store.objects import json_copy
from grid.adapters.store.port import Obj

LARGE_BODY_BYTES = 64 * 1024
"""Bodies at least this long are kept parsed; shorter ones parse in microseconds."""

KEPT_MAX = 32
"""Objects kept at most; the oldest kept is dropped first."""

Key = tuple[str, str, str]
"""(kind, namespace, name)."""


class ParsedCopies:
    """The last written version of each large object, parsed, for the next write."""

    def __init__(self, kept_max: int = KEPT_MAX, large_bytes: int = LARGE_BODY_BYTES) -> None:
        self._kept: dict[Key, tuple[int, Obj]] = {}
        self._max = kept_max
        self._large = large_bytes
        self.hits = 0
        """Reads answered from a kept copy."""

    def get(self, key: Key, resource_version: int) -> Obj | None:
        """A copy of ``key`` at ``resource_version``, or None if not kept at it."""
        kept = self._kept.get(key)
        if kept is None or kept[0] != resource_version:
            return None
        self.hits += 1
        copy: Obj = json_copy(kept[1], "body")
        return copy

    def put(self, key: Key, resource_version: int, obj: Obj, body_bytes: int) -> None:
        """Keep ``obj`` as written at ``resource_version`` when its body is large."""
        self._kept.pop(key, None)
        if body_bytes < self._large:
            return
        self._kept[key] = (resource_version, json_copy(obj, "body"))
        if len(self._kept) > self._max:
            del self._kept[next(iter(self._kept))]

    def forget(self, key: Key) -> None:
        """Drop what is kept of ``key`` (it was deleted, or its write failed)."""
        self._kept.pop(key, None)
