"""The operator's store, with the validated resources of the kinds it watches kept.

Each render round reads the network's GridSites, Secrets, InferenceProviders and
GridNetwork, and each read was a store query, a JSON parse and a model
validation of every object. The operator already follows every one of those
kinds with a watch, so it learns of each change: `WatchedStore` keeps the
models a read validated and hands them out again until the kind moves, that is
until its watch delivers an event or this process writes one of its objects
(read-your-writes holds). A read is kept only while a watch of its kind is open,
so a change nobody would be told of is never hidden.

A change made by another process reaches the kept models when its watch event
arrives (the SQLite store polls every 250 ms), as it reaches the render gate
(`grid.operator.round_gate`), whose round keys move on the same events: a round
that reads the store before that event renders from the state the gate saw.

The kept models are shared between readers, which must not edit them (resource
models are replaced, never edited, throughout the operator).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from grid.adapters.store.port import LabelSelector, Obj, ResourceStore, WatchEvent

M = TypeVar("M", bound=BaseModel)


class WatchedStore:
    """A `ResourceStore` that keeps validated models of watched kinds between changes."""

    def __init__(self, inner: ResourceStore) -> None:
        self.inner = inner
        self._moves: Counter[str] = Counter()
        """Per kind: watch events seen, watches opened and writes made (a version)."""
        self._watching: Counter[str] = Counter()
        self._kept: dict[tuple[str, str, str | None], tuple[int, Any]] = {}

    def _moved(self, kind: str) -> None:
        self._moves[kind] += 1

    async def models(self, kind: str, model: type[M], name: str | None = None) -> list[M]:
        """Every object of ``kind`` (or the one named ``name``, if it exists) as ``model``,
        validated once per change of the kind while a watch of it is open."""
        key = (kind, model.__qualname__, name)
        moves = self._moves[kind]
        kept = self._kept.get(key)
        if kept is not None and kept[0] == moves and self._watching[kind] > 0:
            return list(kept[1])
        found = await _validated(self.inner, kind, model, name)
        if self._watching[kind] > 0:
            self._kept[key] = (moves, found)
        return list(found)

    # -- the ResourceStore port ---------------------------------------------------------

    async def get(self, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        return await self.inner.get(kind, name, namespace=namespace)

    async def list(
        self,
        kind: str,
        label_selector: LabelSelector | None = None,
        *,
        namespace: str | None = None,
    ) -> list[Obj]:
        return await self.inner.list(kind, label_selector, namespace=namespace)

    def watch(
        self, kind: str, since_resource_version: str | None = None
    ) -> AsyncIterator[WatchEvent]:
        return self._watch(kind, since_resource_version)

    async def _watch(self, kind: str, since: str | None) -> AsyncIterator[WatchEvent]:
        self._watching[kind] += 1
        self._moved(kind)
        try:
            async for event in self.inner.watch(kind, since):
                self._moved(kind)
                yield event
        finally:
            self._watching[kind] -= 1
            self._moved(kind)

    async def create(self, obj: Obj) -> Obj:
        try:
            return await self.inner.create(obj)
        finally:
            self._moved(str(obj.get("kind", "")))

    async def replace(self, obj: Obj) -> Obj:
        try:
            return await self.inner.replace(obj)
        finally:
            self._moved(str(obj.get("kind", "")))

    async def patch_status(
        self,
        kind: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
        *,
        namespace: str | None = None,
    ) -> Obj:
        try:
            return await self.inner.patch_status(
                kind, name, status, resource_version, namespace=namespace
            )
        finally:
            self._moved(kind)

    async def delete(self, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        try:
            return await self.inner.delete(kind, name, namespace=namespace)
        finally:
            self._moved(kind)

    async def close(self) -> None:
        await self.inner.close()


async def read_models(
    store: ResourceStore, kind: str, model: type[M], name: str | None = None
) -> list[M]:
    """`WatchedStore.models` through any store (a plain one reads and validates)."""
    if isinstance(store, WatchedStore):
        return await store.models(kind, model, name)
    return await _validated(store, kind, model, name)


async def _validated(store: ResourceStore, kind: str, model: type[M], name: str | None) -> list[M]:
    """Every object of ``kind`` (or the one named ``name``) read and validated as ``model``."""
    if name is not None:
        return [model.model_validate(await store.get(kind, name))]
    return [model.model_validate(o) for o in await store.list(kind)]
