"""The object state of the Kubernetes API emulator: what the API server does on each write.

`KubeState` holds the objects, the store-wide resourceVersion counter and the
event log, and implements create, update, merge patch, server-side apply and
delete as the API server does (see `grid.testing.kube_api` for the list). The
HTTP side, `grid.testing.kube_api.KubeApiEmulator`, routes requests here and
streams the recorded events to watchers.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any

from grid.adapters.store import objects
from grid.core.resources import GROUP, KINDS, VERSION
from grid.errors import GridError, ValidationError

Obj = dict[str, Any]
DEFAULT_RETENTION = 1_000
"""Events kept for watch resumption before a resume gets 410."""


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
    *(Resource(GROUP, VERSION, k.plural, k.kind, False, True) for k in KINDS.values()),
    Resource("", "v1", "configmaps", "ConfigMap", True),
    Resource("", "v1", "secrets", "Secret", True),
    Resource("", "v1", "events", "Event", True),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True),
)
"""What the emulator serves: every Grid kind (the core's `KINDS` table, with a status
subresource) and the core and coordination kinds the operator reads and writes."""


class ApiError(GridError):
    """An API error answered as a ``Status`` object."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message, code=reason)
        self.status, self.reason = status, reason


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
class Stored:
    obj: Obj
    managers: dict[str, tuple[str, set[tuple[str, ...]]]] = field(default_factory=dict)
    """manager -> (operation, owned field paths)."""


class KubeState:
    """Objects, resourceVersions and the event log; writes as the API server does them."""

    def __init__(self, retention: int = DEFAULT_RETENTION) -> None:
        self.retention = retention
        self._resources = {(r.group, r.plural): r for r in RESOURCES}
        self._objects: dict[tuple[str, str, str, str], Stored] = {}
        self._log: list[tuple[int, Resource, Obj]] = []
        self._compacted_through = 0
        self._rv = 0

    def _notify(self, resource: Resource, event: Obj) -> None:
        """Hand a recorded event to live watchers (the HTTP side overrides this)."""

    def compact(self) -> None:
        """Trim the whole event log: every resume from an older version now gets 410."""
        self._compacted_through = self._rv
        self._log.clear()

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
        self._notify(resource, event)

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
        stored = Stored(obj)
        self._own(stored, manager, "Update", _owned_paths(obj, status=False))
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._objects[key] = stored
        self._record(resource, "ADDED", obj)
        return copy.deepcopy(obj)

    def _precondition(self, stored: Stored, body: Obj) -> None:
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

    def _own(self, stored: Stored, manager: str, operation: str, paths: set[Any]) -> None:
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

    def _commit(self, resource: Resource, stored: Stored, new: Obj, before: Obj) -> Obj:
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
        self, resource: Resource, stored: Stored, body: Obj, manager: str, sub: str | None
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
        self, resource: Resource, stored: Stored, patch: Obj, manager: str, sub: str | None
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
