"""Object bookkeeping the embedded stores share: what a Kubernetes API server does on write.

The SQLite store and the in-memory fake both delegate here, so they stamp
metadata, bump ``generation``, detect conflicts and no-op writes, merge-patch
status and match label selectors identically. A Kubernetes adapter needs none of
this: the API server does it. Every function is pure; the caller supplies the
next resourceVersion, a uid and the timestamp, and persists the result.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from grid.adapters.store.encoded import EncodedText
from grid.adapters.store.port import DEFAULT_NAMESPACE, STORED_KINDS, LabelSelector, Obj, StoredKind
from grid.core.resources.types import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN
from grid.errors import Conflict, GridError, ValidationError

NAME_MAX_CHARS = 253
"""Longest ``metadata.name`` (a Kubernetes DNS subdomain)."""

NAMESPACE_MAX_CHARS = 63
"""Longest ``metadata.namespace`` (a Kubernetes DNS label)."""

# The same RFC 1123 rules the resource models use, so the store and the CRDs agree.
_NAME = re.compile(DNS_SUBDOMAIN_PATTERN)
_NAMESPACE = re.compile(DNS_LABEL_PATTERN)
CLIENT_METADATA = ("labels", "annotations", "ownerReferences")
"""Metadata fields a client controls; everything else in metadata is the store's."""
_ENVELOPE = ("apiVersion", "kind", "metadata", "status")


def format_timestamp(moment: dt.datetime) -> str:
    """RFC 3339 UTC with second precision, as Kubernetes writes ``creationTimestamp``."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stored_kind(kind: str) -> StoredKind:
    """The stored kind's description, or `ValidationError` for an unknown kind."""
    info = STORED_KINDS.get(kind)
    if info is None:
        known = ", ".join(sorted(STORED_KINDS))
        raise ValidationError(f"unknown kind {kind!r} (known: {known})", path="kind")
    return info


def resolve_namespace(info: StoredKind, namespace: str | None) -> str:
    """The namespace key for a kind: ``""`` when cluster-scoped, else a valid namespace."""
    if not info.namespaced:
        if namespace:
            raise ValidationError(
                f"{info.kind} is cluster-scoped and takes no namespace", path="metadata.namespace"
            )
        return ""
    ns = namespace or DEFAULT_NAMESPACE
    if not isinstance(ns, str) or len(ns) > NAMESPACE_MAX_CHARS or not _NAMESPACE.match(ns):
        raise ValidationError(
            f"must be a lowercase RFC 1123 label (a-z, 0-9, '-'), at most {NAMESPACE_MAX_CHARS}",
            path="metadata.namespace",
        )
    return ns


def _check_name(name: object, path: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValidationError("is required", path=path)
    if len(name) > NAME_MAX_CHARS or not _NAME.match(name):
        raise ValidationError(
            f"must be a lowercase RFC 1123 name (a-z, 0-9, '-', '.'), at most {NAME_MAX_CHARS}",
            path=path,
        )


def identify(obj: Obj) -> tuple[StoredKind, str, str]:
    """Check an incoming object's envelope and return (kind info, namespace key, name)."""
    if not isinstance(obj, dict):
        raise ValidationError("a resource must be a mapping", path="")
    info = stored_kind(str(obj.get("kind", "")))
    api_version = obj.get("apiVersion")
    if api_version != info.api_version:
        raise ValidationError(
            f"must be {info.api_version!r} for {info.kind}, got {api_version!r}",
            path="apiVersion",
        )
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ValidationError("is required", path="metadata")
    _check_name(meta.get("name"), "metadata.name")
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ValidationError("must map strings to strings", path=f"metadata.{field}")
    return info, resolve_namespace(info, meta.get("namespace")), str(meta["name"])


def desired_state(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Everything but the envelope: ``spec`` for CRDs, ``data``/``type`` for core kinds."""
    return {k: v for k, v in obj.items() if k not in _ENVELOPE}


def _normalize_string_data(obj: Obj) -> Obj:
    """Fold a Secret's ``stringData`` into base64 ``data``, as the API server does."""
    string_data = obj.pop("stringData", None)
    if string_data is None:
        return obj
    if not isinstance(string_data, dict):
        raise ValidationError("must be a mapping", path="stringData")
    data = dict(obj.get("data") or {})
    for key, value in string_data.items():
        data[key] = base64.b64encode(str(value).encode("utf-8")).decode("ascii")
    obj["data"] = data
    return obj


def json_copy(value: Any, path: str) -> Any:
    """A deep copy through JSON, so every store holds exactly what SQLite would.

    Tuples become lists; anything JSON cannot carry (NaN, datetimes, sets) is a
    `ValidationError` naming ``path``, in every store alike.
    """
    try:
        return _plain_copy(value)
    except (_NotPlain, RecursionError):
        pass  # the JSON round trip decides, and converts or refuses
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"must be JSON-compatible ({exc})", path=path) from None


class _NotPlain(GridError):
    """A value the JSON round trip would change or refuse."""


def _plain_copy(value: Any) -> Any:
    """A deep copy of JSON data the round trip keeps as it is, or `_NotPlain`.

    Plain is exactly ``dict`` (string keys), ``list``, ``str``, ``int``, finite
    ``float``, ``bool`` and ``None``, no subclasses but `EncodedText` (a string):
    for those ``json.loads(json.dumps(v))`` is an equal copy of the same types (an
    `EncodedText` comes back a plain string, equal), made here without writing the
    text (an overlay ConfigMap holds a megabyte of it).
    """
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None or kind is EncodedText:
        return value  # immutable, so shared (an `EncodedText` keeps its literal)
    if kind is dict:
        copied = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            copied[key] = _plain_copy(item)
        return copied
    if kind is list:
        return [_plain_copy(item) for item in value]
    if kind is float and math.isfinite(value):
        return value
    raise _NotPlain


def _client_metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {k: json_copy(meta[k], f"metadata.{k}") for k in CLIENT_METADATA if meta.get(k)}


def prepare_create(obj: Obj, *, resource_version: int, uid: str, now: str) -> Obj:
    """The object as stored by a create: server metadata stamped, status dropped."""
    info, namespace, name = identify(obj)
    if obj["metadata"].get("resourceVersion"):
        raise ValidationError(
            "must not be set on an object to be created", path="metadata.resourceVersion"
        )
    body = _normalize_string_data(json_copy(desired_state(obj), "spec"))
    meta: dict[str, Any] = {"name": name}
    if info.namespaced:
        meta["namespace"] = namespace
    meta.update(_client_metadata(obj["metadata"]))
    meta.update(
        uid=uid,
        creationTimestamp=now,
        generation=1,
        resourceVersion=str(resource_version),
    )
    return {"apiVersion": info.api_version, "kind": info.kind, "metadata": meta, **body}


def _check_precondition(current: Obj, resource_version: object) -> None:
    have = current["metadata"]["resourceVersion"]
    if str(resource_version) != have:
        kind, name = current["kind"], current["metadata"]["name"]
        raise Conflict(
            f"{kind} {name!r} was modified: resourceVersion {resource_version} is stale "
            f"(now {have})"
        )


def prepare_replace(current: Obj, obj: Obj, *, resource_version: int) -> Obj | None:
    """The object as stored by a replace, or None when nothing would change.

    Raises `Conflict` when ``obj`` carries a stale resourceVersion.
    """
    identify(obj)
    given = obj["metadata"].get("resourceVersion")
    if not given:
        raise ValidationError("is required to replace an object", path="metadata.resourceVersion")
    _check_precondition(current, given)
    body = _normalize_string_data(json_copy(desired_state(obj), "spec"))
    old_body = desired_state(current)
    meta = {k: v for k, v in current["metadata"].items() if k not in CLIENT_METADATA}
    meta.update(_client_metadata(obj["metadata"]))
    if body == old_body and meta == current["metadata"]:
        return None
    if body != old_body:
        meta["generation"] = int(current["metadata"]["generation"]) + 1
    meta["resourceVersion"] = str(resource_version)
    stored: Obj = {"apiVersion": current["apiVersion"], "kind": current["kind"], "metadata": meta}
    stored.update(body)
    if "status" in current:
        stored["status"] = copy.deepcopy(current["status"])
    return stored


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: mappings merge, ``None`` removes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def prepare_patch_status(
    current: Obj,
    status: Mapping[str, Any],
    *,
    precondition: str | None,
    resource_version: int,
) -> Obj | None:
    """The object after merge-patching its status, or None when the status is unchanged."""
    if not isinstance(status, Mapping):
        raise ValidationError("must be a mapping", path="status")
    if precondition is not None:
        _check_precondition(current, precondition)
    new_status = merge_patch(current.get("status") or {}, json_copy(dict(status), "status"))
    if new_status == (current.get("status") or {}):
        return None
    stored = copy.deepcopy(current)
    stored["status"] = new_status
    stored["metadata"]["resourceVersion"] = str(resource_version)
    return stored


def prepare_delete(current: Obj, *, resource_version: int) -> Obj:
    """The object's last state as reported by its DELETED event."""
    stored = copy.deepcopy(current)
    stored["metadata"]["resourceVersion"] = str(resource_version)
    return stored


def parse_selector(selector: LabelSelector | None) -> list[tuple[str, str, str | None]]:
    """Requirements ``(op, key, value)`` with op in ``= != exists !exists``."""
    if selector is None:
        return []
    if isinstance(selector, Mapping):
        return [("=", str(k), str(v)) for k, v in selector.items()]
    requirements: list[tuple[str, str, str | None]] = []
    for raw in selector.split(","):
        term = raw.strip()
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            requirements.append(("!=", key.strip(), value.strip()))
        elif "=" in term:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            requirements.append(("=", key.strip(), value.strip()))
        elif term.startswith("!"):
            requirements.append(("!exists", term[1:].strip(), None))
        else:
            requirements.append(("exists", term, None))
    for _op, key, _value in requirements:
        if not key:
            raise ValidationError(f"bad label selector {selector!r}", path="labelSelector")
    return requirements


def list_query(
    kind: str, label_selector: LabelSelector | None, namespace: str | None
) -> tuple[str | None, list[tuple[str, str, str | None]]]:
    """What a list of ``kind`` reads: its namespace (None: every one) and requirements."""
    info = stored_kind(kind)
    ns = resolve_namespace(info, namespace) if namespace else None
    return ns, parse_selector(label_selector)


def matches(obj: Obj, requirements: list[tuple[str, str, str | None]]) -> bool:
    """Whether an object's labels satisfy every selector requirement."""
    labels: Mapping[str, str] = obj.get("metadata", {}).get("labels") or {}
    for op, key, value in requirements:
        present = key in labels
        if op == "=" and (not present or labels[key] != value):
            return False
        if op == "!=" and present and labels[key] == value:
            return False
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
    return True
