"""A strict Kubernetes API emulator for tests, on aiohttp, served on 127.0.0.1.

No real API server runs on the test machines, so this one behaves as the API
server does where an operator depends on it:

- server-set metadata (``uid``, ``resourceVersion``, ``creationTimestamp``, and
  ``generation`` for custom resources), 201 on create, 409 ``AlreadyExists``;
- one store-wide ``resourceVersion`` counter; 409 ``Conflict`` on a stale
  precondition (PUT body, merge-patch body or apply body);
- status-subresource isolation for custom resources: a write to the main
  resource leaves ``status`` alone and a write to ``/status`` touches nothing else;
  ``generation`` bumps only when the spec changes; a no-op write bumps nothing;
- server-side apply (``application/apply-patch+yaml``) with ``fieldManager``,
  ``force``, per-manager field ownership in ``metadata.managedFields`` and 409 on a
  conflicting field owned by another manager;
- list with ``labelSelector`` and the list's ``resourceVersion``; watch with
  ``watch=true``, ``resourceVersion``, ``allowWatchBookmarks`` (BOOKMARK events),
  ``timeoutSeconds``, and an in-stream 410 ``Expired`` ERROR event for a version the
  trimmed event log no longer reaches;
- Secrets' ``stringData`` folded into base64 ``data``; Leases and Events.

Every operator request is recorded as ``(verb, group, resource, namespace)`` in
`KubeApiEmulator.audit`, which the RBAC test compares with the chart's ClusterRole.
Faults for tests: `drop_watches` ends every open watch mid-stream,
`pause_watches` refuses new ones with 503 until `resume_watches`, `compact`
trims the event log, and `fail_next` answers the next requests with an error.
This module is the ``kmock`` replacement: kmock 0.8's emulator stores merged
dicts with no resourceVersion, preconditions, status subresource, generation,
apply or watch resumption, so each of these would have been an override of its
request handler anyway.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import datetime as dt
import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from grid.adapters.store import objects
from grid.errors import ValidationError

Obj = dict[str, Any]
Audit = tuple[str, str, str, str]
"""(verb, API group, resource[/subresource], namespace or "")."""

OPERATOR_AGENT = "grid-operator"
"""Requests whose User-Agent starts with this are the operator's and are audited;
a test's own setup writes use another agent and stay out of the RBAC audit."""
DEFAULT_RETENTION = 1_000
"""Events kept for watch resumption before a resume gets 410."""
DEFAULT_BOOKMARK_INTERVAL_S = 0.5
"""How often an idle watch that asked for bookmarks gets one."""


@dataclass(frozen=True)
class Resource:
    """One served resource type."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES = (
    Resource("grid.praxis-proxy.io", "v1alpha1", "gridnetworks", "GridNetwork", False, True),
    Resource("grid.praxis-proxy.io", "v1alpha1", "gridsites", "GridSite", False, True),
    Resource(
        "grid.praxis-proxy.io", "v1alpha1", "inferenceproviders", "InferenceProvider", False, True
    ),
    Resource("", "v1", "configmaps", "ConfigMap", True),
    Resource("", "v1", "secrets", "Secret", True),
    Resource("", "v1", "events", "Event", True),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True),
)


class ApiError(Exception):
    """An API error answered as a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _status(code: int, reason: str, message: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _leaves(value: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Field paths of a value: every dict key path down to a non-dict (lists are atomic)."""
    if isinstance(value, dict) and value:
        out: set[tuple[str, ...]] = set()
        for key, child in value.items():
            out |= _leaves(child, (*prefix, str(key)))
        return out
    return {prefix} if prefix else set()


def _owned_paths(obj: Obj, *, status: bool) -> set[tuple[str, ...]]:
    """The fields a manager can own: labels/annotations, and the body or the status."""
    meta = obj.get("metadata") or {}
    paths = _leaves({k: meta[k] for k in ("labels", "annotations") if meta.get(k)}, ("metadata",))
    if status:
        return paths | _leaves(obj.get("status") or {}, ("status",))
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    return paths | _leaves(body)


def _get_path(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _drop_path(obj: Obj, path: tuple[str, ...]) -> None:
    parents = [obj]
    for key in path[:-1]:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return
        parents.append(child)
    parents[-1].pop(path[-1], None)
    for depth in range(len(parents) - 1, 0, -1):
        if not parents[depth]:
            parents[depth - 1].pop(path[depth - 1], None)


def _fields_v1(paths: set[tuple[str, ...]]) -> Obj:
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


@dataclass
class _Stored:
    obj: Obj
    managers: dict[str, tuple[str, set[tuple[str, ...]]]] = field(default_factory=dict)
    """manager -> (operation, owned field paths)."""


@dataclass(eq=False)
class _Watcher:
    resource: Resource
    namespace: str | None
    queue: asyncio.Queue[Obj | None] = field(default_factory=asyncio.Queue)


class KubeApiEmulator:
    """The emulator: `start` it, point a kubeconfig at `url` with `token`, `stop` it."""

    def __init__(
        self,
        *,
        token: str = "grid-test-token",
        retention: int = DEFAULT_RETENTION,
        bookmark_interval_s: float = DEFAULT_BOOKMARK_INTERVAL_S,
    ) -> None:
        self.token = token
        self.retention = retention
        self.bookmark_interval_s = bookmark_interval_s
        self.audit: Counter[Audit] = Counter()
        self.requests = 0
        self.writes: list[tuple[str, str, str, dict[str, str]]] = []
        """(User-Agent, verb, resource, Lease holders at that moment) per write."""
        self.bookmarked_rv = 0
        """The resourceVersion of the last BOOKMARK sent, for tests to wait on."""
        self._resources = {(r.group, r.plural): r for r in RESOURCES}
        self._objects: dict[tuple[str, str, str, str], _Stored] = {}
        self._log: list[tuple[int, Resource, Obj]] = []
        self._compacted_through = 0
        self._rv = 0
        self._watchers: set[_Watcher] = set()
        self._failures: list[int] = []
        self._watches_paused = False
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- lifecycle and faults -------------------------------------------------

    async def start(self, port: int = 0) -> str:
        """Serve on 127.0.0.1 (an ephemeral port by default); returns the base URL."""
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        server = site._server
        assert server is not None
        sock = server.sockets[0]  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        """End every watch and stop serving."""
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def drop_watches(self) -> None:
        """End every open watch stream, as an API server restart or a load balancer does."""
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(None)

    def pause_watches(self) -> None:
        """End every watch and answer new ones 503 until `resume_watches`, as a
        restarting API server does; writes still go through meanwhile."""
        self._watches_paused = True
        self.drop_watches()

    def resume_watches(self) -> None:
        """Serve watches again."""
        self._watches_paused = False

    def compact(self) -> None:
        """Trim the whole event log: every resume from an older version now gets 410."""
        self._compacted_through = self._rv
        self._log.clear()

    def fail_next(self, *codes: int) -> None:
        """Answer the next requests (one per code) with that HTTP status."""
        self._failures.extend(codes)

    def kubeconfig(self, *, namespace: str = "default") -> Obj:
        """A kubeconfig document that reaches this emulator with its bearer token."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "grid", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "emulator",
                    "context": {"cluster": "emulator", "user": "grid", "namespace": namespace},
                }
            ],
            "current-context": "emulator",
        }

    def lease_holders(self) -> dict[str, str]:
        """``namespace/name`` -> holderIdentity of every Lease."""
        return {
            f"{s.obj['metadata'].get('namespace')}/{s.obj['metadata']['name']}": str(
                (s.obj.get("spec") or {}).get("holderIdentity") or ""
            )
            for s in self._objects.values()
            if s.obj["kind"] == "Lease"
        }

    def objects_of(self, kind: str) -> list[Obj]:
        """Current objects of a kind, for assertions."""
        return [copy.deepcopy(s.obj) for s in self._objects.values() if s.obj["kind"] == kind]

    # -- routing --------------------------------------------------------------

    def _route(self, path: str) -> tuple[Resource, str | None, str | None, str | None]:
        """(resource, namespace, name, subresource) of an API path."""
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, rest = "", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, rest = parts[1], parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find {path}")
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", f"the server could not find {path}")
        resource = self._resources.get((group, rest[0]))
        if resource is None or (namespace is not None and not resource.namespaced):
            raise ApiError(404, "NotFound", f"the server could not find the resource {path}")
        if not resource.namespaced and namespace is not None:
            raise ApiError(404, "NotFound", f"{resource.plural} is cluster-scoped")
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) == 3 else None
        if sub is not None and (sub != "status" or not resource.status_subresource):
            raise ApiError(404, "NotFound", f"no subresource {sub} on {resource.plural}")
        return resource, namespace, name, sub

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        try:
            if request.headers.get("Authorization") != f"Bearer {self.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if self._failures:
                code = self._failures.pop(0)
                raise ApiError(code, "InjectedFailure", f"injected failure {code}")
            resource, namespace, name, sub = self._route(request.path)
            watch = request.query.get("watch") in ("true", "1")
            verb = self._verb(request.method, name, watch)
            plural = f"{resource.plural}/{sub}" if sub else resource.plural
            agent = request.headers.get("User-Agent", "")
            if agent.startswith(OPERATOR_AGENT):
                self.audit[verb, resource.group, plural, namespace or ""] += 1
            if verb in ("create", "update", "patch", "delete"):
                self.writes.append((agent, verb, plural, self.lease_holders()))
            if watch:
                if self._watches_paused:
                    raise ApiError(503, "ServiceUnavailable", "watches are paused")
                return await self._watch(request, resource, namespace)
            body = await self._body(request) if request.method in ("POST", "PUT", "PATCH") else {}
            status, answer = self._dispatch(request, verb, resource, namespace, name, sub, body)
            return web.json_response(answer, status=status)
        except ApiError as exc:
            return web.json_response(_status(exc.code, exc.reason, exc.message), status=exc.code)

    @staticmethod
    def _verb(method: str, name: str | None, watch: bool) -> str:
        if method == "GET":
            return "watch" if watch else ("get" if name else "list")
        verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
        if method not in verbs or (method != "POST" and name is None):
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")
        return verbs[method]

    @staticmethod
    async def _body(request: web.Request) -> Obj:
        raw = await request.read()
        try:
            if request.content_type == "application/apply-patch+yaml":
                parsed = yaml.safe_load(raw)
            else:
                parsed = json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(400, "BadRequest", f"cannot decode the body: {exc}") from None
        if not isinstance(parsed, dict):
            raise ApiError(400, "BadRequest", "the body must be an object")
        return parsed

    def _dispatch(
        self,
        request: web.Request,
        verb: str,
        resource: Resource,
        namespace: str | None,
        name: str | None,
        sub: str | None,
        body: Obj,
    ) -> tuple[int, Obj]:
        if resource.namespaced and namespace is None and verb != "list":
            raise ApiError(404, "NotFound", f"{resource.plural} needs a namespace")
        ns = namespace or ""
        manager = request.query.get("fieldManager", "")
        if verb == "list":
            return 200, self._list(resource, namespace, request.query.get("labelSelector"))
        if verb == "create":
            return 201, self._create(resource, ns, body, manager or "unknown")
        assert name is not None
        key = (resource.group, resource.plural, ns, name)
        if verb == "patch" and request.content_type == "application/apply-patch+yaml":
            if not manager:
                raise ApiError(422, "Invalid", "fieldManager is required for apply")
            force = request.query.get("force") == "true"
            return self._apply(resource, ns, name, body, manager, force, sub)
        stored = self._objects.get(key)
        if stored is None:
            raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
        if verb == "get":
            return 200, copy.deepcopy(stored.obj)
        if verb == "delete":
            return 200, self._delete(resource, key)
        if verb == "update":
            return 200, self._update(resource, stored, body, manager or "unknown", sub)
        if request.content_type != "application/merge-patch+json":
            raise ApiError(415, "UnsupportedMediaType", f"{request.content_type} is not served")
        return 200, self._merge_patch(resource, stored, body, manager or "unknown", sub)

    # -- reads ----------------------------------------------------------------

    def _list(self, resource: Resource, namespace: str | None, selector: str | None) -> Obj:
        try:
            requirements = objects.parse_selector(selector)
        except ValidationError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        # Typed (built-in) list items carry no apiVersion/kind; custom ones do.
        typed = not resource.status_subresource
        items = [
            {k: v for k, v in s.obj.items() if not typed or k not in ("apiVersion", "kind")}
            for (g, p, ns, _n), s in sorted(self._objects.items())
            if (g, p) == (resource.group, resource.plural)
            and (namespace is None or ns == namespace)
            and objects.matches(s.obj, requirements)
        ]
        return {
            "apiVersion": resource.api_version,
            "kind": f"{resource.kind}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    # -- writes ---------------------------------------------------------------

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _record(self, resource: Resource, event_type: str, obj: Obj) -> None:
        event = {"type": event_type, "object": copy.deepcopy(obj)}
        self._log.append((self._rv, resource, event))
        if len(self._log) > self.retention:
            dropped = self._log[: len(self._log) - self.retention]
            self._compacted_through = dropped[-1][0]
            del self._log[: len(dropped)]
        ns = obj["metadata"].get("namespace")
        for watcher in self._watchers:
            if watcher.resource == resource and watcher.namespace in (None, ns):
                watcher.queue.put_nowait(event)

    def _check_body(self, resource: Resource, ns: str, body: Obj, name: str | None) -> Obj:
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            raise ApiError(422, "Invalid", "metadata is required")
        if body.get("kind", resource.kind) != resource.kind:
            raise ApiError(400, "BadRequest", f"kind must be {resource.kind}")
        if body.get("apiVersion", resource.api_version) != resource.api_version:
            raise ApiError(400, "BadRequest", f"apiVersion must be {resource.api_version}")
        if name is not None and meta.get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name in the body does not match the URL")
        if resource.namespaced and meta.get("namespace", ns) != ns:
            raise ApiError(400, "BadRequest", "the namespace in the body does not match the URL")
        if name is None and not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:10]}"
        try:
            objects._check_name(meta.get("name", name), "metadata.name")
        except ValidationError as exc:
            raise ApiError(422, "Invalid", f"metadata.name: {exc}") from None
        return meta

    def _fold_string_data(self, resource: Resource, obj: Obj) -> None:
        if resource.kind == "Secret" and "stringData" in obj:
            data = dict(obj.get("data") or {})
            for key, value in (obj.pop("stringData") or {}).items():
                data[key] = base64.b64encode(str(value).encode()).decode()
            obj["data"] = data

    def _create(self, resource: Resource, ns: str, body: Obj, manager: str) -> Obj:
        meta = self._check_body(resource, ns, body, None)
        key = (resource.group, resource.plural, ns, str(meta["name"]))
        if key in self._objects:
            raise ApiError(
                409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" already exists'
            )
        if meta.get("resourceVersion"):
            raise ApiError(422, "Invalid", "metadata.resourceVersion must not be set on create")
        obj = copy.deepcopy(body)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        if resource.status_subresource:
            obj.pop("status", None)
        self._fold_string_data(resource, obj)
        new_meta = {k: v for k, v in meta.items() if k in objects.CLIENT_METADATA}
        new_meta["name"] = meta["name"]
        if meta.get("generateName"):
            new_meta["generateName"] = meta["generateName"]
        if resource.namespaced:
            new_meta["namespace"] = ns
        new_meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now())
        if resource.group and resource.status_subresource:
            new_meta["generation"] = 1
        obj["metadata"] = new_meta
        stored = _Stored(obj)
        self._own(stored, manager, "Update", _owned_paths(obj, status=False))
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._objects[key] = stored
        self._record(resource, "ADDED", obj)
        return copy.deepcopy(obj)

    def _precondition(self, stored: _Stored, body: Obj) -> None:
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        have = stored.obj["metadata"]["resourceVersion"]
        if wanted and str(wanted) != have:
            name = stored.obj["metadata"]["name"]
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )

    def _own(self, stored: _Stored, manager: str, operation: str, paths: set[Any]) -> None:
        for other, (op, owned) in list(stored.managers.items()):
            if other != manager:
                owned -= paths
                if not owned:
                    del stored.managers[other]
                else:
                    stored.managers[other] = (op, owned)
        if paths:
            before = (
                stored.managers.get(manager, ("", set()))[1] if operation == "Update" else set()
            )
            stored.managers[manager] = (operation, before | paths)
        stored.obj["metadata"]["managedFields"] = [
            {
                "manager": m,
                "operation": op,
                "apiVersion": stored.obj["apiVersion"],
                "time": _now(),
                "fieldsType": "FieldsV1",
                "fieldsV1": _fields_v1(owned),
            }
            for m, (op, owned) in sorted(stored.managers.items())
        ]

    def _commit(self, resource: Resource, stored: _Stored, new: Obj, before: Obj) -> Obj:
        """Store ``new`` unless it equals ``before``; bump generation on a spec change."""

        def body(o: Obj) -> Obj:
            return {k: v for k, v in o.items() if k not in ("metadata", "status")}

        strip = ("resourceVersion", "managedFields")
        same_meta = {k: v for k, v in new["metadata"].items() if k not in strip} == {
            k: v for k, v in before["metadata"].items() if k not in strip
        }
        if same_meta and body(new) == body(before) and new.get("status") == before.get("status"):
            stored.obj = before
            return copy.deepcopy(before)
        if "generation" in new["metadata"] and body(new) != body(before):
            new["metadata"]["generation"] = int(before["metadata"]["generation"]) + 1
        new["metadata"]["resourceVersion"] = self._next_rv()
        stored.obj = new
        self._record(resource, "MODIFIED", new)
        return copy.deepcopy(new)

    def _writable(self, resource: Resource, current: Obj, incoming: Obj, sub: str | None) -> Obj:
        """The object after a write that may only touch its own half (main or status)."""
        new = copy.deepcopy(current)
        if sub == "status":
            new["status"] = copy.deepcopy(incoming.get("status"))
            if new["status"] is None:
                new.pop("status")
            return new
        for key in [k for k in new if k not in ("apiVersion", "kind", "metadata", "status")]:
            del new[key]
        for key, value in incoming.items():
            if key not in ("apiVersion", "kind", "metadata", "status"):
                new[key] = copy.deepcopy(value)
        if not resource.status_subresource and "status" in incoming:
            new["status"] = copy.deepcopy(incoming["status"])
        meta = incoming.get("metadata") or {}
        for key in ("labels", "annotations", "ownerReferences"):
            if meta.get(key):
                new["metadata"][key] = copy.deepcopy(meta[key])
            else:
                new["metadata"].pop(key, None)
        self._fold_string_data(resource, new)
        return new

    def _update(
        self, resource: Resource, stored: _Stored, body: Obj, manager: str, sub: str | None
    ) -> Obj:
        self._check_body(resource, stored.obj["metadata"].get("namespace", ""), body, None)
        self._precondition(stored, body)
        before = copy.deepcopy(stored.obj)
        new = self._writable(resource, stored.obj, body, sub)
        changed = _owned_paths(new, status=sub == "status") - _owned_paths(
            before, status=sub == "status"
        )
        stored.obj = new
        self._own(stored, manager, "Update", changed)
        return self._commit(resource, stored, new, before)

    def _merge_patch(
        self, resource: Resource, stored: _Stored, patch: Obj, manager: str, sub: str | None
    ) -> Obj:
        self._precondition(stored, patch)
        before = copy.deepcopy(stored.obj)
        patch = {k: v for k, v in patch.items() if k not in ("apiVersion", "kind")}
        meta_patch = patch.pop("metadata", None) or {}
        if sub == "status":
            patch = {"status": patch.get("status")} if "status" in patch else {}
        elif resource.status_subresource:
            patch.pop("status", None)
        merged = objects.merge_patch(stored.obj, patch)
        for key in ("labels", "annotations"):
            if key in meta_patch and sub != "status":
                merged["metadata"] = objects.merge_patch(merged["metadata"], {key: meta_patch[key]})
        self._fold_string_data(resource, merged)
        stored.obj = merged
        self._own(stored, manager, "Update", set())
        return self._commit(resource, stored, merged, before)

    def _apply(
        self,
        resource: Resource,
        ns: str,
        name: str,
        config: Obj,
        manager: str,
        force: bool,
        sub: str | None,
    ) -> tuple[int, Obj]:
        key = (resource.group, resource.plural, ns, name)
        self._check_body(resource, ns, config, name)
        stored = self._objects.get(key)
        paths = _owned_paths(config, status=sub == "status")
        if stored is None:
            if sub == "status":
                raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
            created = self._create(
                resource,
                ns,
                {
                    **config,
                    "metadata": {
                        k: v for k, v in config["metadata"].items() if k != "resourceVersion"
                    },
                },
                manager,
            )
            fresh = self._objects[key]
            fresh.managers = {}
            self._own(fresh, manager, "Apply", paths)
            created["metadata"]["managedFields"] = fresh.obj["metadata"]["managedFields"]
            return 201, created
        self._precondition(stored, config)
        conflicts = [
            (other, path)
            for other, (_op, owned) in stored.managers.items()
            if other != manager
            for path in owned & paths
            if _get_path(stored.obj, path) != _get_path(config, path)
        ]
        if conflicts and not force:
            other, path = conflicts[0]
            raise ApiError(
                409, "Conflict", f'Apply failed: conflict with "{other}" at {".".join(path)}'
            )
        before = copy.deepcopy(stored.obj)
        new = copy.deepcopy(stored.obj)
        previous = stored.managers.get(manager, ("", set()))[1]
        for path in previous - paths:
            _drop_path(new, path)
        applied = {k: v for k, v in config.items() if k not in ("apiVersion", "kind", "metadata")}
        if sub == "status":
            applied = {"status": applied.get("status") or {}}
        elif resource.status_subresource:
            applied.pop("status", None)
        new = objects.merge_patch(new, applied)
        meta = config.get("metadata") or {}
        for field_name in ("labels", "annotations"):
            if meta.get(field_name):
                merged = {**(new["metadata"].get(field_name) or {}), **meta[field_name]}
                new["metadata"][field_name] = merged
        self._fold_string_data(resource, new)
        stored.obj = new
        stored.managers.pop(manager, None)
        self._own(stored, manager, "Apply", paths)
        return 200, self._commit(resource, stored, new, before)

    def _delete(self, resource: Resource, key: tuple[str, str, str, str]) -> Obj:
        stored = self._objects.pop(key)
        obj = copy.deepcopy(stored.obj)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._record(resource, "DELETED", obj)
        return obj

    # -- watch ----------------------------------------------------------------

    async def _watch(
        self, request: web.Request, resource: Resource, namespace: str | None
    ) -> web.StreamResponse:
        since = request.query.get("resourceVersion", "")
        bookmarks = request.query.get("allowWatchBookmarks") == "true"
        timeout = float(request.query.get("timeoutSeconds", "0") or 0)
        requirements = objects.parse_selector(request.query.get("labelSelector"))
        watcher = _Watcher(resource, namespace)
        # Snapshot and registration happen with no await between them, so no
        # write can fall between the initial state and the live stream.
        backlog: list[Obj] = []
        expired = False
        if since in ("", "0"):
            current = [
                s.obj
                for (g, p, ns, _n), s in sorted(self._objects.items())
                if (g, p) == (resource.group, resource.plural) and namespace in (None, ns)
            ]
            backlog = [{"type": "ADDED", "object": copy.deepcopy(o)} for o in current]
        elif int(since) < self._compacted_through:
            expired = True
        else:
            backlog = [
                copy.deepcopy(event)
                for rv, res, event in self._log
                if rv > int(since)
                and res == resource
                and namespace in (None, event["object"]["metadata"].get("namespace"))
            ]
        self._watchers.add(watcher)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            await response.prepare(request)
            if expired:
                gone = _status(410, "Expired", f"too old resource version: {since}")
                await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                return response
            for event in backlog:
                await self._send(response, event, requirements)
            await self._stream(response, watcher, requirements, bookmarks, timeout)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.discard(watcher)
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    async def _stream(
        self,
        response: web.StreamResponse,
        watcher: _Watcher,
        requirements: list[tuple[str, str, str | None]],
        bookmarks: bool,
        timeout: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout if timeout else None
        while True:
            wait = self.bookmark_interval_s if bookmarks else None
            if end is not None:
                left = end - loop.time()
                if left <= 0:
                    return
                wait = left if wait is None else min(wait, left)
            try:
                event = await asyncio.wait_for(watcher.queue.get(), wait)
            except TimeoutError:
                if bookmarks:
                    mark = {
                        "apiVersion": watcher.resource.api_version,
                        "kind": watcher.resource.kind,
                        "metadata": {"resourceVersion": str(self._rv)},
                    }
                    await response.write(
                        json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n"
                    )
                    self.bookmarked_rv = self._rv
                continue
            if event is None:
                return
            await self._send(response, event, requirements)

    @staticmethod
    async def _send(
        response: web.StreamResponse, event: Obj, requirements: list[tuple[str, str, str | None]]
    ) -> None:
        if objects.matches(event["object"], requirements):
            await response.write(json.dumps(event).encode() + b"\n")


async def connect_store(
    emulator: KubeApiEmulator, directory: Path, *, agent: str = "", **options: Any
) -> Any:
    """A `KubernetesStore` on the emulator through a kubeconfig file, with fast retries.

    ``agent`` replaces the operator's User-Agent (a test harness's setup writes).
    """
    from grid.adapters.kube.client import ClientSettings
    from grid.adapters.store.kubernetes import KubernetesStore

    path = directory / f"kubeconfig-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump(emulator.kubeconfig()))
    settings = ClientSettings(backoff_base_s=0.01, backoff_cap_s=0.1, request_timeout_s=10.0)
    store = await KubernetesStore.connect(path, settings=settings, **options)
    if agent:
        store.client._api.user_agent = agent
    return store
