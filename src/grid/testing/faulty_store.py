"""A fault-injecting wrapper around any `ResourceStore`, for the feedback fault tests.

`FaultyStore` delegates every call to the wrapped store, except the status
writes of one kind, where it can answer 409 `Conflict` a number of times, fail
with a store error, stall longer than a request budget, or answer with an
object that does not show the write. Faults apply to ``patch_status`` only,
since that is the one write the feedback writer makes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from grid.adapters.store.port import LabelSelector, Obj, ResourceStore, WatchEvent
from grid.errors import Conflict, GridError


class FaultyStore:
    """A `ResourceStore` that injects faults into ``patch_status`` of ``kind``."""

    def __init__(self, inner: ResourceStore, kind: str = "GridNetwork") -> None:
        self.inner = inner
        self.kind = kind
        self.conflicts = 0
        """Answer this many of the next status writes with `Conflict`, without writing."""
        self.fail_writes = False
        """Fail every status write with a store error, without writing."""
        self.stall_s = 0.0
        """Wait this long before each status write (a slow store)."""
        self.unverified = False
        """Write, but answer with the object as it was before the write."""
        self.patch_calls = 0

    async def get(self, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        """Delegated."""
        return await self.inner.get(kind, name, namespace=namespace)

    async def list(
        self,
        kind: str,
        label_selector: LabelSelector | None = None,
        *,
        namespace: str | None = None,
    ) -> list[Obj]:
        """Delegated."""
        return await self.inner.list(kind, label_selector, namespace=namespace)

    def watch(
        self, kind: str, since_resource_version: str | None = None
    ) -> AsyncIterator[WatchEvent]:
        """Delegated."""
        return self.inner.watch(kind, since_resource_version)

    async def create(self, obj: Obj) -> Obj:
        """Delegated."""
        return await self.inner.create(obj)

    async def replace(self, obj: Obj) -> Obj:
        """Delegated."""
        return await self.inner.replace(obj)

    async def patch_status(
        self,
        kind: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
        *,
        namespace: str | None = None,
    ) -> Obj:
        """The wrapped write, after the configured faults."""
        if kind != self.kind:
            return await self.inner.patch_status(
                kind, name, status, resource_version, namespace=namespace
            )
        self.patch_calls += 1
        if self.stall_s:
            await asyncio.sleep(self.stall_s)
        if self.conflicts > 0:
            self.conflicts -= 1
            raise Conflict(f"{kind} {name!r}: injected resourceVersion conflict")
        if self.fail_writes:
            raise GridError("injected store failure", code="store_unavailable")
        before = await self.inner.get(kind, name, namespace=namespace)
        stored = await self.inner.patch_status(
            kind, name, status, resource_version, namespace=namespace
        )
        return before if self.unverified else stored

    async def delete(self, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        """Delegated."""
        return await self.inner.delete(kind, name, namespace=namespace)

    async def close(self) -> None:
        """Delegated."""
        await self.inner.close()
