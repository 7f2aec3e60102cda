"""The Helm chart, linted and rendered by real helm, checked against Kubernetes' OpenAPI models."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.core.resources import KINDS, GridNetwork
from grid.core.resources.crd_schema import crd_file_name, crd_yaml
from grid.testing.helm import CHART, MODELS, PRESETS, REPO, check_manifest, helm, render

KUSTOMIZE = REPO / "deploy" / "kustomize"


def _by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_each_preset_lints_strictly_and_renders_valid_objects(preset: Path) -> None:
    helm("lint", "--strict", str(CHART), "--namespace", "grid", "--values", str(preset))
    objs = render(preset)
    for obj in objs:
        if (obj["apiVersion"], obj["kind"]) in MODELS:
            assert check_manifest(obj) == []
        elif obj["kind"] == "GridNetwork":
            GridNetwork.model_validate(obj)
        else:
            assert obj["kind"] in {"ServiceMonitor", "PrometheusRule"}, obj["kind"]
    (deployment,) = _by_kind(objs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"]
    service = next(s for s in _by_kind(objs, "Service") if "metrics" not in s["metadata"]["name"])
    ports = {(p["protocol"], p["port"]) for p in service["spec"]["ports"]}
    assert ports == {("UDP", 7946), ("TCP", 7946), ("TCP", 7947)}


def test_the_servicemonitor_selects_the_metrics_service() -> None:
    objs = render(CHART / "ci" / "ha-values.yaml")
    (monitor,) = _by_kind(objs, "ServiceMonitor")
    metrics = next(
        s for s in _by_kind(objs, "Service") if s["metadata"]["name"].endswith("metrics")
    )
    labels = metrics["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in metrics["spec"]["ports"]}


def _args(objs: list[dict[str, Any]]) -> list[str]:
    (deployment,) = _by_kind(objs, "Deployment")
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_the_chart_wires_metering_without_extra_args() -> None:
    """The operator learns the site's gateway admin URLs from the GridNetwork it renders
    (gatewayRefs[].adminUrl) and from metering.gatewayMetrics, never from extraArgs."""
    objs = render(CHART / "ci" / "metering-values.yaml")
    (network,) = _by_kind(objs, "GridNetwork")
    spec = GridNetwork.model_validate(network).spec
    assert spec.gateway_metrics_urls("east") == ["http://edge-admin.gateways.svc:9901/metrics"]
    assert spec.gateway_metrics_urls("west") == []  # the gateway runs at east
    (ref,) = spec.gateway_refs
    assert ref.consumer_config is not None and ref.consumer_config.client_auth.mode == "apiKey"
    args = _args(objs)
    assert "--gateway-metrics=http://legacy-gateway.gateways.svc:9901/metrics" in args
    assert (
        yaml.safe_load((CHART / "ci" / "metering-values.yaml").read_text()).get("extraArgs") is None
    )
    default = render(CHART / "ci" / "default-values.yaml")
    assert not [a for a in _args(default) if a.startswith("--gateway-metrics")]
    assert _by_kind(default, "GridNetwork") == []


@pytest.mark.parametrize(
    "bad",
    [
        ["--set", "replicaCount=0"],
        ["--set", "network.trust.mode=trust-everyone"],
        ["--set", "service.advertise=no-port"],
        ["--set", "unknownKey=1"],
        ["--set", "replicaCount=2", "--set", "leaderElection.enabled=false"],
        ["--set", "site="],
        ["--set", "metering.gatewayMetrics[0]=edge:9901"],
        ["--set", "network.gatewayRefs[0].adminUrl=http://edge:9901"],
        ["--set", "network.gatewayRefs[0].name=edge,network.gatewayRefs[0].adminUrl=edge:9901"],
    ],
    ids=[
        "replicas",
        "trust",
        "advertise",
        "unknown",
        "ha-unelected",
        "no-site",
        "metrics-url",
        "ref-without-name",
        "admin-url",
    ],
)
def test_values_the_schema_or_templates_refuse(bad: list[str]) -> None:
    with pytest.raises(AssertionError, match="failed"):
        render(CHART / "ci" / "default-values.yaml", "grid", *bad)


def test_the_openapi_check_catches_what_the_api_server_would_refuse() -> None:
    (deployment,) = _by_kind(render(CHART / "ci" / "default-values.yaml"), "Deployment")
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "two"
    missing = copy.deepcopy(deployment)
    del missing["spec"]["template"]["spec"]["containers"][0]["name"]
    for broken in (typo, wrong_type, missing):
        assert check_manifest(broken) != []


def test_the_chart_crds_are_the_generated_ones() -> None:
    for kind in KINDS:
        assert (CHART / "crds" / crd_file_name(kind)).read_text() == crd_yaml(kind)


def test_the_schema_file_is_json_and_documents_every_default_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(defaults) == set(schema["properties"])


def test_the_kustomize_base_is_the_charts_render_and_the_example_overlay_builds() -> None:
    preset = CHART / "ci" / "kustomize-values.yaml"
    rendered = helm("template", "grid", str(CHART), "--namespace", "grid", "--values", str(preset))
    assert (KUSTOMIZE / "base" / "grid-operator.yaml").read_text() == rendered, (
        "regenerate deploy/kustomize/base/grid-operator.yaml (docs/install-kubernetes.md)"
    )
    from grid.testing.helm import kubectl

    objs = [d for d in yaml.safe_load_all(kubectl("kustomize", str(KUSTOMIZE / "example"))) if d]
    assert {o["kind"] for o in objs} >= {"CustomResourceDefinition", "Deployment", "ClusterRole"}
    for obj in objs:
        assert check_manifest(obj) == []
    (deployment,) = _by_kind(objs, "Deployment")
    assert "--site=east" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
