"""Mutation fuzzing: whatever the models accept, the generated CRD schema accepts too,
and untrusted input only ever produces a typed resource or `InvalidResource`."""

from __future__ import annotations

import contextlib
import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grid.core.resources import KINDS, InvalidResource, parse_resource
from grid.core.resources.crd_schema import openapi_schema
from grid.testing.strategies import json_values

REPO = Path(__file__).resolve().parents[3]

INTERESTING = [
    "5s", "500ms", "0s", "1m30s", "east:7946", "[::1]:7946", "Mutual", "Plaintext", "pin",
    "spiffe", "gossip", "poll", "local", "remote", "api_provider", "open_ai", "BearerToken",
    "grid-demo", "east", "", "Pending", "Active", "/metrics", "https://api.example.com/v1",
    "ab" * 32, "true", "3",
]  # fmt: skip

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=70000),
    st.floats(min_value=-2, max_value=2, allow_nan=False, allow_infinity=False),
    st.sampled_from(INTERESTING),
    st.text(max_size=8),
)
json_value = json_values(json_leaf, st.text(max_size=6), max_size=3, max_leaves=6)


@cache
def seeds() -> tuple[dict[str, Any], ...]:
    docs: list[dict[str, Any]] = []
    for path in sorted((REPO / "examples" / "quickstart").glob("*.yaml")):
        docs.extend(
            d
            for d in yaml.safe_load_all(path.read_text())
            if isinstance(d, dict) and d.get("kind") in KINDS
        )
    return tuple(docs)


def to_draft7(node: Any) -> Any:
    if isinstance(node, list):
        return [to_draft7(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_draft7(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if out.pop("nullable", False):
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(bound) is True:
            out[bound] = out.pop(plain)
    return out


@cache
def validator(kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(to_draft7(openapi_schema(kind)))


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(paths(value, (*prefix, i)))
    return found


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(seeds())))
    for _ in range(draw(st.integers(min_value=1, max_value=2))):
        candidates = [p for p in paths(doc) if p[0] not in ("apiVersion", "kind")]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        parent: Any = doc
        for part in path[:-1]:
            parent = parent[part]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(json_value)
    return doc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_model_acceptance_implies_schema_acceptance(doc: dict[str, Any]) -> None:
    try:
        resource = parse_resource(doc)
    except InvalidResource as exc:
        assert exc.issues and all(issue.message for issue in exc.issues)
        return
    errors = list(validator(doc["kind"]).iter_errors(doc))
    assert not errors, f"schema rejects a model-valid object: {errors[0].message}"
    wire = resource.to_wire()
    assert not list(validator(doc["kind"]).iter_errors(wire))
    assert parse_resource(wire) == resource


@settings(max_examples=200, deadline=None)
@given(json_value)
def test_arbitrary_input_never_escapes_as_another_exception(value: Any) -> None:
    for kind in KINDS:
        obj = {"apiVersion": "grid.praxis-proxy.io/v1alpha1", "kind": kind, "metadata": value}
        with contextlib.suppress(InvalidResource):
            parse_resource(obj)
        with contextlib.suppress(InvalidResource):
            parse_resource({**obj, "metadata": {"name": "x"}, "spec": value})
