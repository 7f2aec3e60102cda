"""The `ResourceStore` port: the Kubernetes-shaped seam every controller writes through.

Objects are plain JSON-compatible dicts in the Kubernetes shape (``apiVersion``,
``kind``, ``metadata``, ``spec`` or ``data``, ``status``). The port is kept as small
as the Kubernetes API it mirrors, so a Kubernetes adapter implements it with no
logic of its own:

- ``get`` / ``list`` read; ``list`` takes an equality-based label selector.
- ``create`` stamps ``uid``, ``creationTimestamp``, ``generation: 1`` and a
  ``resourceVersion``; an existing name raises `AlreadyExists`.
- ``replace`` must carry ``metadata.resourceVersion``; a stale one raises `Conflict`.
- ``patch_status`` applies an RFC 7386 JSON merge patch to ``status`` (the status
  subresource); with ``resource_version`` it is optimistic like ``replace``.
- ``delete`` removes and returns the object; a missing name raises `NotFound`.
- ``watch`` yields ordered `WatchEvent`s with no gaps; resuming from a
  ``resourceVersion`` yields everything after it, or raises `Expired` when the
  event log no longer reaches back that far (Kubernetes' 410 Gone).

``resourceVersion`` is a store-wide, monotonically increasing integer carried as a
string. ``metadata.generation`` bumps only when the desired state (everything but
``metadata`` and ``status``) changes. As with a Kubernetes status subresource,
``create`` and ``replace`` ignore ``status``. A write that changes nothing bumps
nothing and emits no event, so controllers that rewrite identical state do not
wake each other up.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from grid.core.resources import API_VERSION, KINDS
from grid.errors import GridError

Obj = dict[str, Any]
"""A resource object in the Kubernetes shape."""

LabelSelector = Mapping[str, str] | str
"""``{"key": "value"}`` (every pair must match) or a string like ``a=b,c!=d,e,!f``."""

CRD_API_VERSION = API_VERSION
CORE_API_VERSION = "v1"
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class StoredKind:
    """What a store must know about a kind: its apiVersion, plural and scope."""

    kind: str
    api_version: str
    plural: str
    namespaced: bool


STORED_KINDS: dict[str, StoredKind] = {
    info.kind: info
    for info in (
        *(StoredKind(k.kind, API_VERSION, k.plural, namespaced=False) for k in KINDS.values()),
        StoredKind("ConfigMap", CORE_API_VERSION, "configmaps", namespaced=True),
        StoredKind("Secret", CORE_API_VERSION, "secrets", namespaced=True),
    )
}
"""The kinds a store accepts: every cluster-scoped Grid kind (the core's `KINDS` table)
and the namespaced core kinds the operator writes (overlay ConfigMaps) or reads (Secrets)."""


class Expired(GridError):
    """A watch asked to resume from a resourceVersion older than the retained event log.

    The caller must list again and watch from the list's resourceVersion, as a
    Kubernetes client does on ``410 Gone``.
    """

    code = "expired"


class EventType(enum.StrEnum):
    """The kind of change a watch event reports."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True)
class WatchEvent:
    """One change to one object, in store order.

    ``object`` is the object after the change (for DELETED, its last state with
    the deletion's resourceVersion). ``resource_version`` equals
    ``object["metadata"]["resourceVersion"]``.
    """

    type: EventType
    object: Obj
    resource_version: str


@runtime_checkable
class ResourceStore(Protocol):
    """Kubernetes-shaped resource storage with optimistic concurrency and watch."""

    async def get(self, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        """The object, or `NotFound`. Namespaced kinds default to ``default``."""
        ...

    async def list(
        self,
        kind: str,
        label_selector: LabelSelector | None = None,
        *,
        namespace: str | None = None,
    ) -> list[Obj]:
        """Objects of a kind ordered by (namespace, name); all namespaces when None."""
        ...

    def watch(
        self, kind: str, since_resource_version: str | None = None
    ) -> AsyncIterator[WatchEvent]:
        """Ordered changes to a kind.

        Without ``since_resource_version`` it first yields ADDED for every existing
        object (a consistent snapshot), then every later change. With it, it yields
        every change after that version, or raises `Expired`.
        """
        ...

    async def create(self, obj: Obj) -> Obj:
        """Store a new object and return it as stored; `AlreadyExists` on a taken name."""
        ...

    async def replace(self, obj: Obj) -> Obj:
        """Replace an object's desired state; `Conflict` on a stale resourceVersion."""
        ...

    async def patch_status(
        self,
        kind: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
        *,
        namespace: str | None = None,
    ) -> Obj:
        """Merge-patch ``status`` (RFC 7386: ``None`` removes a key, lists are replaced)."""
        ...

    async def delete(self, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        """Remove an object and return its last state; `NotFound` when absent."""
        ...

    async def close(self) -> None:
        """Release the store's resources; open watches end."""
        ...
