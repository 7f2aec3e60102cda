"""Kubernetes CustomResourceDefinitions generated from the resource models.

`grid crds` and ``deploy/crds/`` come from here, so the CRD schema can never drift
from the pydantic models that Grid itself validates with. Pydantic emits JSON Schema
(2020-12); Kubernetes wants a *structural* OpenAPI v3.0 schema, so the generated
schema is rewritten:

- ``$ref``/``$defs`` are inlined (Kubernetes allows no references);
- ``anyOf: [X, {type: null}]`` becomes ``X`` plus ``nullable: true``;
- ``const`` becomes a one-value ``enum``; numeric ``exclusiveMinimum`` becomes the
  v3.0 form ``minimum`` plus ``exclusiveMinimum: true``;
- ``additionalProperties: false`` is dropped (Kubernetes forbids it and prunes unknown
  fields instead), and ``title`` and ``default: null`` are dropped;
- ``patternProperties`` (mappings with checked keys) becomes ``additionalProperties``;
- ``metadata`` is left to the API server as a bare ``type: object``;
- every node gets a ``type``.

Every pattern the models use is RE2-compatible, because the API server evaluates
them with Go's regexp package.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import yaml

from grid.core.resources import GROUP, KINDS, VERSION, KindInfo

JsonSchema = dict[str, Any]

# `propertyNames` (key patterns) has no equivalent in a Kubernetes structural schema;
# the models still check keys, the API server cannot.
_DROP_KEYS = frozenset({"title", "$defs", "discriminator", "propertyNames"})

PRINTER_COLUMNS: Mapping[str, list[dict[str, Any]]] = {
    "GridNetwork": [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Grid ID", "type": "string", "jsonPath": ".status.gridId"},
        {"name": "Sites", "type": "integer", "jsonPath": ".status.connectedSites"},
        {"name": "Transport", "type": "string", "jsonPath": ".spec.signalTransport.mode"},
        {"name": "Region", "type": "string", "jsonPath": ".spec.region", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "GridSite": [
        {"name": "Network", "type": "string", "jsonPath": ".spec.gridNetworkRef"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Region", "type": "string", "jsonPath": ".spec.region"},
        {"name": "Zone", "type": "string", "jsonPath": ".spec.zone"},
        {"name": "Egress", "type": "string", "jsonPath": ".spec.egress.address", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "InferenceProvider": [
        {"name": "Network", "type": "string", "jsonPath": ".spec.gridNetworkRef"},
        {"name": "Backend", "type": "string", "jsonPath": ".spec.backendKind"},
        {"name": "Provider", "type": "string", "jsonPath": ".spec.providerKind"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Endpoint", "type": "string", "jsonPath": ".spec.endpoint", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "AgentToolProvider": [
        {"name": "Network", "type": "string", "jsonPath": ".spec.gridNetworkRef"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Endpoint", "type": "string", "jsonPath": ".spec.endpoint", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "AgentToAgentProvider": [
        {"name": "Network", "type": "string", "jsonPath": ".spec.gridNetworkRef"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Endpoint", "type": "string", "jsonPath": ".spec.endpoint", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
}
"""``kubectl get`` columns of each kind."""


def openapi_schema(kind: str) -> JsonSchema:
    """The structural ``openAPIV3Schema`` of one kind, generated from its model."""
    raw = KINDS[kind].model.model_json_schema(by_alias=True, mode="validation")
    defs: Mapping[str, JsonSchema] = raw.get("$defs", {})
    schema: JsonSchema = _structural(raw, defs)
    props = schema["properties"]
    props["apiVersion"] = {"type": "string", "description": "The API version of the object."}
    props["kind"] = {"type": "string", "description": "The kind of the object."}
    props["metadata"] = {"type": "object"}
    schema["required"] = [r for r in schema.get("required", []) if r not in ("metadata",)]
    if not schema["required"]:
        del schema["required"]
    _mark_condition_lists(props.get("status", {}))
    return schema


def crd(kind: str) -> JsonSchema:
    """The complete ``apiextensions.k8s.io/v1`` CustomResourceDefinition of one kind."""
    info: KindInfo = KINDS[kind]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": info.crd_name,
            "labels": {"app.kubernetes.io/part-of": "grid"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": info.kind,
                "listKind": f"{info.kind}List",
                "plural": info.plural,
                "singular": info.singular,
                "shortNames": list(info.short_names),
                "categories": ["grid"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS[kind]),
                    "schema": {"openAPIV3Schema": openapi_schema(kind)},
                }
            ],
        },
    }


def crd_yaml(kind: str) -> str:
    """One CRD as a YAML document (deterministic: the bytes ``deploy/crds/`` holds)."""
    return yaml.safe_dump(
        crd(kind), sort_keys=False, default_flow_style=False, width=100, allow_unicode=True
    )


def crd_file_name(kind: str) -> str:
    """The file name of a kind's CRD under ``deploy/crds/``."""
    return f"{KINDS[kind].crd_name}.yaml"


def all_crds_yaml() -> str:
    """Every CRD as one multi-document YAML stream, in `KINDS` order."""
    return "---\n" + "---\n".join(crd_yaml(kind) for kind in KINDS)


def _structural(node: Any, defs: Mapping[str, JsonSchema]) -> Any:
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = _inline_ref(node, defs)
    node = _collapse_nullable(node, defs)
    out: JsonSchema = {}
    for key, value in node.items():
        if key in _DROP_KEYS or (key == "additionalProperties" and value is False):
            continue
        if key == "default" and value is None:
            continue
        if key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key == "patternProperties":
            # Kubernetes supports no patternProperties: a mapping with constrained keys
            # (label selectors) publishes its value schema only; the models check keys.
            (sub,) = value.values()
            out["additionalProperties"] = _structural(sub, defs)
        elif key in ("items", "additionalProperties", "allOf", "anyOf", "oneOf", "not"):
            out[key] = _structural(value, defs)
        else:
            out[key] = copy.deepcopy(value)
    return _to_openapi_v3_0(out)


def _inline_ref(node: JsonSchema, defs: Mapping[str, JsonSchema]) -> JsonSchema:
    ref = node.get("$ref")
    if ref is None:
        if "allOf" in node and len(node["allOf"]) == 1 and "$ref" in node["allOf"][0]:
            rest = {k: v for k, v in node.items() if k != "allOf"}
            return _inline_ref({**node["allOf"][0], **rest}, defs)
        return node
    target = copy.deepcopy(defs[ref.rsplit("/", 1)[1]])
    siblings = {k: v for k, v in node.items() if k != "$ref"}
    return _inline_ref({**target, **siblings}, defs)


def _collapse_nullable(node: JsonSchema, defs: Mapping[str, JsonSchema]) -> JsonSchema:
    options = node.get("anyOf")
    if not isinstance(options, list):
        return node
    non_null = [o for o in options if o != {"type": "null"}]
    if len(non_null) != 1 or len(non_null) == len(options):
        return node
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    merged = {**_inline_ref(non_null[0], defs), **rest, "nullable": True}
    return merged


def _to_openapi_v3_0(node: JsonSchema) -> JsonSchema:
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = node.get(bound)
        if isinstance(value, int | float) and not isinstance(value, bool):
            node[plain] = value
            node[bound] = True
    if "type" not in node:
        node["type"] = _infer_type(node)
    return node


def _infer_type(node: JsonSchema) -> str:
    if "properties" in node or "additionalProperties" in node:
        return "object"
    if "items" in node:
        return "array"
    values = node.get("enum", [])
    if values and all(isinstance(v, str) for v in values):
        return "string"
    if values and all(isinstance(v, bool) for v in values):
        return "boolean"
    if values and all(isinstance(v, int) for v in values):
        return "integer"
    raise ValueError(f"cannot infer a structural type for schema keys {sorted(node)}")


def _mark_condition_lists(status: JsonSchema) -> None:
    # Conditions are a list-map keyed by type, as in every Kubernetes status, so
    # server-side apply merges them per condition instead of replacing the list.
    conditions = status.get("properties", {}).get("conditions")
    if conditions is not None:
        conditions["x-kubernetes-list-type"] = "map"
        conditions["x-kubernetes-list-map-keys"] = ["type"]
