"""The generated CRDs: structural, RE2-safe, and accepting exactly what the models accept."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from grid.core.resources import KINDS
from grid.core.resources.crd_schema import all_crds_yaml, crd, openapi_schema

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"

# Syntax Go's RE2 rejects: lookaround, backreferences, atomic groups, possessive
# quantifiers, conditionals and \Z.
RE2_UNSUPPORTED = re.compile(
    r"\(\?=|\(\?!|\(\?<=|\(\?<!|\(\?>|\(\?\(|\(\?P=|\\[1-9]|\\k<|[*+?}]\+|\\Z|\\G"
)


def walk(node: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path (skipping the keyword containers)."""
    if not isinstance(node, dict):
        return
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")
    for key in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(node.get(key, [])):
            yield from walk(sub, f"{path}.{key}[{i}]")


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_crd_envelope(kind: str) -> None:
    doc = crd(kind)
    info = KINDS[kind]
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
    assert doc["kind"] == "CustomResourceDefinition"
    assert doc["metadata"]["name"] == f"{info.plural}.grid.praxis-proxy.io"
    spec = doc["spec"]
    assert spec["group"] == "grid.praxis-proxy.io"
    assert spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == kind
    assert spec["names"]["plural"] == info.plural
    assert spec["names"]["shortNames"] == list(info.short_names)
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert columns["Phase"]["jsonPath"] == ".status.phase"
    assert columns["Age"] == {
        "name": "Age",
        "type": "date",
        "jsonPath": ".metadata.creationTimestamp",
    }


def test_schema_is_structural(kind: str) -> None:
    schema = openapi_schema(kind)
    assert schema["type"] == "object"
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert "status" in schema["properties"]
    assert "spec" in schema["properties"]
    text = yaml.safe_dump(schema)
    assert "$ref" not in text and "$defs" not in text
    for path, node in walk(schema):
        assert "type" in node, f"{path} has no type"
        assert node["type"] in {"object", "array", "string", "integer", "number", "boolean"}
        assert "$ref" not in node, path
        assert "const" not in node, path
        for unsupported in ("patternProperties", "propertyNames", "$schema", "definitions"):
            assert unsupported not in node, f"{path} uses {unsupported}"
        assert node.get("additionalProperties") is not False, path
        for key in ("anyOf", "oneOf", "allOf"):
            assert key not in node, f"{path} uses {key}"
        if node["type"] == "object":
            assert not ("properties" in node and "additionalProperties" in node), path
        if node["type"] == "array":
            assert isinstance(node.get("items"), dict), f"{path} array without items"
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert node.get(bound, True) is True, f"{path} uses a numeric {bound}"
        if "default" in node:
            assert node["default"] is not None, path


def test_patterns_are_re2_compatible(kind: str) -> None:
    patterns = [
        (path, node["pattern"]) for path, node in walk(openapi_schema(kind)) if "pattern" in node
    ]
    assert patterns, "expected constrained strings"
    for path, pattern in patterns:
        assert not RE2_UNSUPPORTED.search(pattern), f"{path}: {pattern}"
        re.compile(pattern)


def test_re2_checker_catches_unsupported_syntax() -> None:
    for bad in [r"^(?=a)b$", r"^(?!x)", r"(a)\1", r"(?<=a)b", r"a++", r"abc\Z"]:
        assert RE2_UNSUPPORTED.search(bad), bad
    assert not RE2_UNSUPPORTED.search(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_defaults_and_nullable_are_carried_over() -> None:
    spec = openapi_schema("GridNetwork")["properties"]["spec"]["properties"]
    swim = spec["swim"]["properties"]
    assert swim["gossipNodes"]["default"] == 3
    assert swim["probeInterval"]["default"] == "5s"
    assert swim["suspicionTimeout"]["default"] == "10s"
    assert spec["signalTransport"]["nullable"] is True
    assert spec["signalTransport"]["properties"]["mode"]["enum"] == ["gossip", "poll"]
    ratio = spec["admission"]["properties"]["excluded"]["properties"]["queueDepth"]
    assert (ratio["minimum"], ratio["maximum"]) == (0, 1)
    status = openapi_schema("GridNetwork")["properties"]["status"]["properties"]
    assert {"gridId", "connectedSites", "overlays", "gatewayFeedback", "conditions"} <= set(status)
    assert status["phase"]["enum"] == ["Pending", "Initializing", "Active", "Degraded"]
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_crd_stream_holds_the_three_crds() -> None:
    docs = [d for d in yaml.safe_load_all(all_crds_yaml()) if d]
    assert [d["spec"]["names"]["kind"] for d in docs] == list(KINDS)


# --- the examples against the generated schema ------------------------------------


def to_draft7(node: Any) -> Any:
    """Translate OpenAPI v3.0 (`nullable`, boolean exclusive bounds) to JSON Schema draft 7."""
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


def validator(kind: str) -> jsonschema.Draft7Validator:
    schema = to_draft7(copy.deepcopy(openapi_schema(kind)))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def example_resources() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        if "bad" in path.parts:
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in KINDS:
                found.append((f"{path.relative_to(REPO)}:{doc['metadata']['name']}", doc))
    return found


def test_examples_exist() -> None:
    kinds = {doc["kind"] for _, doc in example_resources()}
    assert kinds == set(KINDS)


@pytest.mark.parametrize(("where", "doc"), example_resources(), ids=lambda v: str(v)[:60])
def test_every_example_validates_against_the_generated_schema(
    where: str, doc: dict[str, Any]
) -> None:
    errors = sorted(validator(doc["kind"]).iter_errors(doc), key=str)
    assert not errors, f"{where}: {errors[0].message} at {list(errors[0].absolute_path)}"


@pytest.mark.parametrize(
    ("kind", "mutate", "where"),
    [
        ("GridNetwork", lambda d: d["spec"]["swim"].update(gossipNodes="3"), "gossipNodes"),
        ("GridNetwork", lambda d: d["spec"]["admission"]["excluded"].update(kvCache=2), "kvCache"),
        ("GridSite", lambda d: d["spec"]["trust"].update(certFingerprint="AB"), "certFingerprint"),
        ("GridSite", lambda d: d["spec"]["egress"].update(address="no-port"), "address"),
        ("InferenceProvider", lambda d: d["spec"].update(backendKind="moon"), "backendKind"),
        ("InferenceProvider", lambda d: d["spec"].update(models=[]), "models"),
    ],
)
def test_generated_schema_rejects_what_the_models_reject(
    kind: str, mutate: Any, where: str
) -> None:
    doc = copy.deepcopy(
        next(d for w, d in example_resources() if d["kind"] == kind and "quickstart" in w)
    )
    mutate(doc)
    errors = list(validator(kind).iter_errors(doc))
    assert errors
    assert any(where in "/".join(map(str, e.absolute_path)) for e in errors)
