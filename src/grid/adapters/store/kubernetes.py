"""The `ResourceStore` port on the Kubernetes API.

The API server does the bookkeeping the embedded stores do in
`grid.adapters.store.objects`: this adapter only checks the envelope before
sending (so a bad object fails with the same `ValidationError` path in every
store) and maps HTTP onto the port:

- ``get``/``list`` are GETs (``labelSelector`` passed through); list items get
  their ``apiVersion``/``kind`` back, which typed list answers leave out.
- ``create`` POSTs; ``replace`` PUTs with the object's ``resourceVersion``
  precondition, except ConfigMaps, which are written by server-side apply with
  field manager ``grid-operator`` (force, plus the same precondition).
- ``patch_status`` is a JSON merge patch on the ``status`` subresource, carrying
  ``metadata.resourceVersion`` as a precondition when one is given; 409 is `Conflict`.
- ``watch`` lists, then watches from the list's version with bookmarks; a stream
  that drops or times out, or a watch refused with 429 or 5xx, is re-opened from
  the last version seen (an event's or a bookmark's) with backoff; a 410 raises
  `Expired` so the caller lists again.
- A ``status.phase`` change written through ``patch_status`` is also recorded as
  a Kubernetes Event, at most one per object per `EVENT_MIN_INTERVAL_S`.

``metadata.managedFields`` is the server's bookkeeping and is dropped from the
objects returned, so the objects look alike in every store. Secret bodies are
never logged and never quoted in errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from grid.adapters.kube.client import (
    FIELD_MANAGER,
    ApiFailure,
    ClientSettings,
    Gone,
    KubeClient,
    api_path,
)
from grid.adapters.store import objects
from grid.adapters.store.port import (
    DEFAULT_NAMESPACE,
    EventType,
    Expired,
    LabelSelector,
    Obj,
    StoredKind,
    WatchEvent,
)
from grid.adapters.tracing import status_write_span
from grid.errors import GridError, ValidationError

log = logging.getLogger("grid.store.kubernetes")

EVENT_MIN_INTERVAL_S = 10.0
"""Shortest gap between two Events for one object; phase changes in between are
not reported as Events (they are still in status). Shorter is chattier."""
APPLY_KINDS = frozenset({"ConfigMap"})
"""Kinds whose ``replace`` is a server-side apply by `FIELD_MANAGER`."""
_Objs = list[Obj]


def _selector(selector: LabelSelector | None) -> str:
    objects.parse_selector(selector)  # same ValidationError as the embedded stores
    if selector is None:
        return ""
    if isinstance(selector, Mapping):
        return ",".join(f"{k}={v}" for k, v in selector.items())
    return selector


def _clean(obj: Obj, info: StoredKind) -> Obj:
    obj.setdefault("apiVersion", info.api_version)
    obj.setdefault("kind", info.kind)
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


class KubernetesStore:
    """A `ResourceStore` on a Kubernetes API server. Open it with `KubernetesStore.connect`."""

    def __init__(
        self,
        client: KubeClient,
        *,
        event_namespace: str = DEFAULT_NAMESPACE,
        event_min_interval_s: float = EVENT_MIN_INTERVAL_S,
        reporting_instance: str = "",
    ) -> None:
        self.client = client
        self._event_ns = event_namespace
        self._event_gap = event_min_interval_s
        self._instance = reporting_instance
        self._phases: dict[tuple[str, str, str], str] = {}
        self._last_event: dict[tuple[str, str, str], float] = {}
        self._closed = asyncio.Event()
        self.write_guard: Callable[[], None] | None = None
        """Called before every write; leader election sets it to refuse writes
        from a replica whose leadership has lapsed."""
        self.event_failed: Callable[[GridError], None] | None = None
        """Called with each phase Event the API client gave up writing (the operator
        counts it); the status write it follows has landed regardless."""

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | Path | None = None,
        *,
        settings: ClientSettings | None = None,
        **options: Any,
    ) -> KubernetesStore:
        """A store on the cluster named by ``kubeconfig``, ``KUBECONFIG`` or in-cluster config."""
        return cls(await KubeClient.connect(kubeconfig, settings), **options)

    def _where(self, kind: str, namespace: str | None) -> tuple[StoredKind, str]:
        info = objects.stored_kind(kind)
        return info, objects.resolve_namespace(info, namespace)

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise GridError("the store is closed", code="store_closed")

    def _check_write(self) -> None:
        self._check_open()
        if self.write_guard is not None:
            self.write_guard()

    async def _write(self, method: str, path: str, **options: Any) -> Obj:
        """One write request, fenced again right before each attempt leaves."""
        return await self.client.request(method, path, guard=self._check_write, **options)

    # -- reads ---------------------------------------------------------------

    async def get(self, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        """The object, or `NotFound`."""
        self._check_open()
        info, ns = self._where(kind, namespace)
        path = api_path(info.api_version, info.plural, ns or None, name)
        obj = await self.client.request(
            "GET", path, what=f"{kind} {name!r}", secret=kind == "Secret"
        )
        return _clean(obj, info)

    async def _list(self, info: StoredKind, ns: str | None, selector: str) -> tuple[_Objs, str]:
        path = api_path(info.api_version, info.plural, ns)
        query = {"labelSelector": selector} if selector else {}
        answer = await self.client.request(
            "GET", path, what=f"{info.kind} list", query=query, secret=info.kind == "Secret"
        )
        items = [_clean(o, info) for o in answer.get("items") or []]
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return items, str(answer.get("metadata", {}).get("resourceVersion", ""))

    async def list(
        self,
        kind: str,
        label_selector: LabelSelector | None = None,
        *,
        namespace: str | None = None,
    ) -> list[Obj]:
        """Objects of a kind matching the selector, ordered by (namespace, name)."""
        self._check_open()
        info = objects.stored_kind(kind)
        ns = objects.resolve_namespace(info, namespace) if namespace else None
        items, _rv = await self._list(info, ns, _selector(label_selector))
        return items

    # -- writes --------------------------------------------------------------

    async def create(self, obj: Obj) -> Obj:
        """POST a new object; `AlreadyExists` on a taken name."""
        self._check_write()
        info, ns, name = objects.identify(obj)
        if obj["metadata"].get("resourceVersion"):
            raise ValidationError(
                "must not be set on an object to be created", path="metadata.resourceVersion"
            )
        body = objects.json_copy(obj, "spec")
        body["metadata"].pop("managedFields", None)
        if info.namespaced:
            body["metadata"]["namespace"] = ns
        path = api_path(info.api_version, info.plural, ns or None)
        created = await self._write(
            "POST",
            path,
            what=f"{info.kind} {name!r}",
            query={"fieldManager": FIELD_MANAGER},
            body=body,
            secret=info.kind == "Secret",
        )
        return _clean(created, info)

    async def replace(self, obj: Obj) -> Obj:
        """PUT (or, for ConfigMaps, apply) with the resourceVersion precondition."""
        self._check_write()
        info, ns, name = objects.identify(obj)
        if not obj["metadata"].get("resourceVersion"):
            raise ValidationError(
                "is required to replace an object", path="metadata.resourceVersion"
            )
        body = objects.json_copy(obj, "spec")
        meta = body["metadata"]
        for server_field in ("managedFields", "uid", "creationTimestamp", "generation"):
            meta.pop(server_field, None)
        if info.namespaced:
            meta["namespace"] = ns
        path = api_path(info.api_version, info.plural, ns or None, name)
        what = f"{info.kind} {name!r}"
        if info.kind in APPLY_KINDS:
            body.pop("status", None)
            stored = await self._write(
                "PATCH",
                path,
                what=what,
                query={"fieldManager": FIELD_MANAGER, "force": "true"},
                body=body,
                content_type="application/apply-patch+yaml",
            )
        else:
            stored = await self._write(
                "PUT",
                path,
                what=what,
                query={"fieldManager": FIELD_MANAGER},
                body=body,
                secret=info.kind == "Secret",
            )
        return _clean(stored, info)

    async def patch_status(
        self,
        kind: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
        *,
        namespace: str | None = None,
    ) -> Obj:
        """Merge-patch the status subresource; optimistic when ``resource_version`` is given."""
        self._check_write()
        info, ns = self._where(kind, namespace)
        if not isinstance(status, Mapping):
            raise ValidationError("must be a mapping", path="status")
        patch: Obj = {"status": objects.json_copy(dict(status), "status")}
        if resource_version is not None:
            patch["metadata"] = {"resourceVersion": str(resource_version)}
        path = api_path(info.api_version, info.plural, ns or None, name, "status")
        with status_write_span(kind, name, status):
            stored = _clean(
                await self._write(
                    "PATCH",
                    path,
                    what=f"{kind} {name!r}",
                    query={"fieldManager": FIELD_MANAGER},
                    body=patch,
                    content_type="application/merge-patch+json",
                ),
                info,
            )
        await self._note_phase(info, ns, stored)
        return stored

    async def delete(self, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        """DELETE an object and return its last state."""
        self._check_write()
        info, ns = self._where(kind, namespace)
        path = api_path(info.api_version, info.plural, ns or None, name)
        gone = await self._write("DELETE", path, what=f"{kind} {name!r}", secret=kind == "Secret")
        self._phases.pop((kind, ns, name), None)
        return _clean(gone, info)

    # -- events --------------------------------------------------------------

    async def _note_phase(self, info: StoredKind, ns: str, obj: Obj) -> None:
        """Record a phase change as an Event, throttled per object; failures only log."""
        phase = str((obj.get("status") or {}).get("phase") or "")
        key = (info.kind, ns, obj["metadata"]["name"])
        before = self._phases.get(key)
        self._phases[key] = phase
        if not phase or phase == before:
            return
        now = time.monotonic()
        if now - self._last_event.get(key, -self._event_gap) < self._event_gap:
            return
        self._last_event[key] = now
        try:
            await self._write(
                "POST",
                api_path("v1", "events", ns or self._event_ns),
                what="Event",
                body=_phase_event(obj, ns or self._event_ns, before, phase, self._instance),
            )
        except GridError as exc:
            log.warning("event not recorded", extra={"code": exc.code, "kind": info.kind})
            if self.event_failed is not None:
                self.event_failed(exc)

    # -- watch ---------------------------------------------------------------

    def watch(
        self, kind: str, since_resource_version: str | None = None
    ) -> AsyncIterator[WatchEvent]:
        """Ordered changes to a kind (see `ResourceStore.watch`)."""
        info = objects.stored_kind(kind)
        return self._watch(info, since_resource_version)

    async def _watch(self, info: StoredKind, since: str | None) -> AsyncIterator[WatchEvent]:
        if since is None:
            items, version = await self._list(info, None, "")
            for obj in items:
                yield WatchEvent(EventType.ADDED, obj, obj["metadata"]["resourceVersion"])
        else:
            version = since
        path = api_path(info.api_version, info.plural)
        failures = 0
        while not self._closed.is_set():
            query = {
                "watch": "true",
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(self.client.settings.watch_timeout_s),
            }
            try:
                async for line in self._until_closed(path, info, query):
                    event_type, obj = line.get("type"), line.get("object") or {}
                    failures = 0
                    if event_type == "ERROR":
                        self._raise_watch_error(info, obj)
                    version = str(obj.get("metadata", {}).get("resourceVersion", version))
                    if event_type == "BOOKMARK":
                        continue
                    yield WatchEvent(EventType(event_type), _clean(obj, info), version)
            except Gone as exc:
                raise Expired(f"{info.kind} watch: {exc.message}") from None
            except ApiFailure as exc:
                if exc.status != 429 and exc.status < 500:
                    raise
                failures += 1
                log.info("watch refused; retrying", extra={"kind": info.kind, "status": exc.status})
                await self._pause(self.client.backoff_s(min(failures, 8)))
            except (aiohttp.ClientError, TimeoutError):
                failures += 1
                log.info("watch dropped; resuming", extra={"kind": info.kind, "from": version})
                await self._pause(self.client.backoff_s(min(failures, 8)))

    async def _until_closed(self, path: str, info: StoredKind, query: dict[str, str]) -> Any:
        """The watch's lines, ending when the store closes."""
        lines = self.client.stream(path, what=f"{info.kind} watch", query=query)
        closing = asyncio.ensure_future(self._closed.wait())
        try:
            while True:
                nxt = asyncio.ensure_future(anext(lines))
                await asyncio.wait({nxt, closing}, return_when=asyncio.FIRST_COMPLETED)
                if not nxt.done():
                    nxt.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await nxt
                    return
                try:
                    yield nxt.result()
                except StopAsyncIteration:
                    return
        finally:
            closing.cancel()
            await lines.aclose()

    def _raise_watch_error(self, info: StoredKind, status: Obj) -> None:
        code = int(status.get("code") or 0)
        message = str(status.get("message", ""))[:300]
        if code == 410:
            raise Expired(f"{info.kind} watch: {message or 'resourceVersion too old'}")
        raise GridError(f"{info.kind} watch failed: HTTP {code} {message}", code="kubernetes_api")

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closed.wait(), seconds)

    async def close(self) -> None:
        """End open watches and close the connection pool."""
        if self._closed.is_set():
            return
        self._closed.set()
        await asyncio.sleep(0)
        await self.client.close()


def _phase_event(obj: Obj, ns: str, before: str | None, phase: str, instance: str) -> Obj:
    meta = obj["metadata"]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    warning = phase in ("Degraded", "Failed", "Unreachable", "Rejected")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": ns},
        "involvedObject": {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": "PhaseChanged",
        "message": f"phase {before or 'unset'} -> {phase}",
        "type": "Warning" if warning else "Normal",
        "source": {"component": FIELD_MANAGER},
        "reportingComponent": FIELD_MANAGER,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
