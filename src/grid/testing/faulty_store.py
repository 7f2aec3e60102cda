"""A fault-injecting wrapper around any `ResourceStore`, for the fault tests.

`FaultyStore` delegates every call to the wrapped store, except:

* the status writes of one kind, where it can answer 409 `Conflict` a number
  of times, fail with a store error, stall longer than a request budget, or
  answer with an object that does not show the write (the feedback writer's
  faults);
* any write (``create``, ``replace``, ``patch_status``, ``delete``) that a
  `WriteFault` in ``write_faults`` matches, which fails with the error the
  store raises for that failure (`fault_error`: 403, 404, 409, 410, 422, 429
  with a Retry-After, 500, 503, a timeout, a reset connection) without writing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from grid.adapters.kube.client import ApiFailure, Gone
from grid.adapters.store.port import LabelSelector, Obj, ResourceStore, WatchEvent
from grid.errors import Conflict, GridError, NotFound, ValidationError

FAULTS = ("403", "404", "409", "410", "422", "429", "500", "503", "timeout", "reset")
"""Every failure a write can meet, by HTTP status or by transport failure."""
RETRY_AFTER_S = 0.05
"""The ``Retry-After`` an injected 429 carries."""


def fault_error(fault: str, what: str = "write") -> BaseException:
    """The exception a store raises for ``fault`` (one of `FAULTS`), as the Kubernetes
    client maps an API answer (the SQLite store raises the same port errors)."""
    if fault == "403":
        return GridError(f"{what}: HTTP 403 Forbidden (injected)", code="forbidden")
    if fault == "404":
        return NotFound(f"{what} not found (injected)")
    if fault == "409":
        return Conflict(f"{what}: HTTP 409 Conflict (injected)")
    if fault == "410":
        return Gone(f"{what}: HTTP 410 Gone (injected)")
    if fault == "422":
        return ValidationError(f"{what}: HTTP 422 Invalid (injected)")
    if fault in ("429", "500", "503"):
        retry = RETRY_AFTER_S if fault == "429" else None
        return ApiFailure(
            f"{what}: the API server kept failing (HTTP {fault}, injected)",
            status=int(fault),
            retry_after_s=retry,
            code="store_unavailable",
        )
    if fault == "timeout":
        return TimeoutError(f"{what}: timed out (injected)")
    if fault == "reset":
        return ConnectionResetError(f"{what}: connection reset (injected)")
    raise ValueError(f"unknown fault {fault!r}")


Matcher = Callable[[str, str, str, Mapping[str, Any]], bool]
"""(verb, kind, name, body) -> whether a write is hit; the body is the object or the patch."""


@dataclass
class WriteFault:
    """Fail every write ``matches`` accepts with `fault_error` of ``fault``, while active."""

    fault: str
    matches: Matcher
    active: bool = True
    hits: int = 0


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
        self.write_faults: list[WriteFault] = []
        """Faults injected into any write they match (see `WriteFault`)."""

    def _inject(self, verb: str, kind: str, name: str, body: Mapping[str, Any]) -> None:
        for fault in self.write_faults:
            if fault.active and fault.matches(verb, kind, name, body):
                fault.hits += 1
                raise fault_error(fault.fault, f"{verb} {kind} {name!r}")

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
        """Delegated, unless a write fault matches."""
        self._inject("create", obj["kind"], obj["metadata"]["name"], obj)
        return await self.inner.create(obj)

    async def replace(self, obj: Obj) -> Obj:
        """Delegated, unless a write fault matches."""
        self._inject("replace", obj["kind"], obj["metadata"]["name"], obj)
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
        self._inject("patch_status", kind, name, status)
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
        """Delegated, unless a write fault matches."""
        self._inject("delete", kind, name, {})
        return await self.inner.delete(kind, name, namespace=namespace)

    async def close(self) -> None:
        """Delegated."""
        await self.inner.close()
