"""How `grid get/apply/delete` name kinds and print stored objects, kubectl-style.

Kinds resolve from a kind, plural, singular or short name (``gridsites``, ``gs``,
``cm``...). Tables carry NAME, PHASE and AGE plus a few kind-specific columns.
Secret values never leave the store through the CLI: every printed Secret has its
``data`` values replaced by `REDACTED`, and tables show only the key count.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from grid.core.resources import GROUP, KINDS
from grid.errors import NotFound

REDACTED = "<redacted>"
"""What a Secret value is printed as."""


@dataclass(frozen=True)
class CliKind:
    """A kind as the CLI names it."""

    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    group: str
    namespaced: bool

    @property
    def resource(self) -> str:
        """``singular.group`` as kubectl prints it (``gridsite.grid.praxis-proxy.io``)."""
        return f"{self.singular}.{self.group}" if self.group else self.singular

    @property
    def plural_resource(self) -> str:
        """``plural.group`` as kubectl names it in errors."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


CLI_KINDS: tuple[CliKind, ...] = (
    *(
        CliKind(info.kind, info.plural, info.singular, info.short_names, GROUP, False)
        for info in KINDS.values()
    ),
    CliKind("ConfigMap", "configmaps", "configmap", ("cm",), "", True),
    CliKind("Secret", "secrets", "secret", (), "", True),
)


def resolve_kind(name: str) -> CliKind:
    """Resolve a kind, plural, singular or short name (case-insensitive), or `NotFound`."""
    wanted = name.lower()
    for info in CLI_KINDS:
        names = (info.kind.lower(), info.plural, info.singular, *info.short_names)
        if wanted in names or wanted in (info.resource, info.plural_resource):
            return info
    known = ", ".join(k.plural for k in CLI_KINDS)
    raise NotFound(f'the server doesn\'t have a resource type "{name}" (known: {known})')


def redact(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy safe to print: Secret ``data``/``stringData`` values replaced."""
    if obj.get("kind") != "Secret":
        return obj
    safe = dict(obj)
    for field in ("data", "stringData"):
        if isinstance(obj.get(field), dict):
            safe[field] = dict.fromkeys(obj[field], REDACTED)
    return safe


def age(created: str | None, now: dt.datetime) -> str:
    """kubectl's AGE: the largest whole unit, e.g. ``45s``, ``12m``, ``3h``, ``9d``."""
    if not created:
        return "<unknown>"
    try:
        then = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _get(obj: dict[str, Any], *path: str) -> Any:
    node: Any = obj
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _text(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "<none>"
    return str(value)


Column = tuple[str, Callable[[dict[str, Any]], Any]]

_COLUMNS: dict[str, list[Column]] = {
    "GridNetwork": [
        ("SITES", lambda o: _get(o, "status", "connectedSites")),
        ("REGION", lambda o: _get(o, "spec", "region")),
        ("GATEWAYS", lambda o: len(_get(o, "spec", "gatewayRefs") or [])),
    ],
    "GridSite": [
        ("NETWORK", lambda o: _get(o, "spec", "gridNetworkRef")),
        ("REGION", lambda o: _get(o, "spec", "region")),
        ("ZONE", lambda o: _get(o, "spec", "zone")),
        ("EGRESS", lambda o: _get(o, "spec", "egress", "address")),
    ],
    "InferenceProvider": [
        ("NETWORK", lambda o: _get(o, "spec", "gridNetworkRef")),
        ("BACKEND", lambda o: _get(o, "spec", "backendKind")),
        (
            "MODELS",
            lambda o: ",".join(str(m.get("name")) for m in _get(o, "spec", "models") or []),
        ),
    ],
    "AgentToolProvider": [
        ("NETWORK", lambda o: _get(o, "spec", "gridNetworkRef")),
        (
            "TOOLS",
            lambda o: ",".join(
                str(t.get("name"))
                for t in _get(o, "spec", "tools") or _get(o, "status", "tools") or []
            ),
        ),
    ],
    "AgentToAgentProvider": [
        ("NETWORK", lambda o: _get(o, "spec", "gridNetworkRef")),
        ("ENDPOINT", lambda o: _get(o, "spec", "endpoint")),
    ],
    "ConfigMap": [("DATA", lambda o: len(o.get("data") or {}))],
    "Secret": [
        ("TYPE", lambda o: o.get("type") or "Opaque"),
        ("DATA", lambda o: len(o.get("data") or {})),
    ],
}


def table(kind: CliKind, items: Sequence[dict[str, Any]], now: dt.datetime) -> str:
    """A kubectl-like table: NAMESPACE (namespaced kinds), NAME, PHASE, extras, AGE."""
    headers = ["NAME"]
    if kind.namespaced:
        headers.insert(0, "NAMESPACE")
    else:
        headers.append("PHASE")
    extras = _COLUMNS[kind.kind]
    headers += [title for title, _ in extras] + ["AGE"]
    rows: list[list[str]] = []
    for obj in items:
        row = [str(_get(obj, "metadata", "name"))]
        if kind.namespaced:
            row.insert(0, str(_get(obj, "metadata", "namespace")))
        else:
            row.append(_text(_get(obj, "status", "phase")))
        row += [_text(read(obj)) for _, read in extras]
        row.append(age(_get(obj, "metadata", "creationTimestamp"), now))
        rows.append(row)
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = [
        "   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in [headers, *rows]
    ]
    return "\n".join(lines)


def render(objects: Sequence[dict[str, Any]], output: str, *, single: bool) -> str:
    """Objects as YAML or JSON: the object itself for one name, else a ``List``."""
    safe = [redact(o) for o in objects]
    document: Any = safe[0] if single else {"apiVersion": "v1", "kind": "List", "items": safe}
    if output == "json":
        return json.dumps(document, indent=2, sort_keys=False)
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False).rstrip("\n")
