"""Manifest parsing: every bad-input category becomes one-line problems naming
the file, the resource and the field; good input becomes typed, keyed resources."""

from __future__ import annotations

import textwrap

import pytest

from grid.core.resources import GridNetwork
from grid.core.resources.manifest import ManifestError, Manifests, Problem, Source, parse_manifests
from grid.core.resources.secret import Secret

NETWORK = """
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridNetwork
metadata:
  name: grid-demo
"""


def parse(*texts: str) -> Manifests:
    return parse_manifests(
        Source(f"in{i}.yaml", textwrap.dedent(text)) for i, text in enumerate(texts)
    )


def problems(*texts: str) -> list[Problem]:
    with pytest.raises(ManifestError) as info:
        parse(*texts)
    assert info.value.problems
    return list(info.value.problems)


def only_problem(*texts: str) -> Problem:
    found = problems(*texts)
    assert len(found) == 1, [str(p) for p in found]
    return found[0]


def assert_one_line(problem: Problem, file: str, resource: str, field: str) -> None:
    line = str(problem)
    assert "\n" not in line
    assert line.startswith(f"{file}:")
    assert f": {resource}: {field}: " in line


def test_good_input_is_keyed_by_name() -> None:
    manifests = parse(
        NETWORK,
        """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridSite
        metadata: {name: east}
        spec: {gridNetworkRef: grid-demo, region: us-east-1}
        ---
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: InferenceProvider
        metadata: {name: vllm-east}
        spec:
          gridNetworkRef: grid-demo
          backendKind: local
          providerKind: self_hosted
          models: [{name: llama-3.1-8b-instruct}]
          auth:
            strategy: BearerToken
            secretRef: {name: creds, namespace: grid-system, key: token}
        ---
        apiVersion: v1
        kind: Secret
        metadata: {name: creds, namespace: grid-system}
        stringData: {token: sk-hidden}
        """,
    )
    assert isinstance(manifests.networks["grid-demo"], GridNetwork)
    assert manifests.sites["east"].spec.region == "us-east-1"
    provider = manifests.providers["vllm-east"]
    assert provider.spec.auth is not None and provider.spec.auth.secret_ref is not None
    secret = manifests.find_secret(provider.spec.auth.secret_ref)
    assert isinstance(secret, Secret)
    assert secret.has_key("token")
    assert [r.kind for r in manifests.resources()] == [
        "GridNetwork",
        "GridSite",
        "InferenceProvider",
    ]
    assert list(manifests.sites_of("grid-demo")) == ["east"]
    assert list(manifests.providers_of("other")) == []
    assert "sk-hidden" not in repr(manifests)
    assert "sk-hidden" not in repr(secret)


def test_empty_documents_are_skipped() -> None:
    assert list(parse("---\n" + NETWORK + "---\n").networks) == ["grid-demo"]


def test_malformed_yaml_names_file_and_line_without_quoting_it() -> None:
    problem = only_problem(
        NETWORK,
        """
        apiVersion: v1
        kind: Secret
        metadata: {name: creds, namespace: ns}
        stringData:
          token: [sk-leaky-value
        """,
    )
    assert problem.file == "in1.yaml"
    assert problem.line is not None and problem.line >= 5
    assert "malformed YAML" in str(problem)
    assert "sk-leaky-value" not in str(problem)


def test_document_that_is_not_a_mapping() -> None:
    problem = only_problem("- just\n- a list\n")
    assert "mapping" in problem.message


def test_unknown_kind() -> None:
    problem = only_problem(
        """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridPlanet
        metadata: {name: mars}
        """
    )
    assert_one_line(problem, "in0.yaml", "GridPlanet/mars", "kind")


def test_unknown_api_version_for_a_grid_kind() -> None:
    problem = only_problem(
        NETWORK,
        """
        apiVersion: grid.praxis-proxy.io/v2
        kind: GridSite
        metadata: {name: east}
        spec: {gridNetworkRef: grid-demo}
        """,
    )
    assert_one_line(problem, "in1.yaml", "GridSite/east", "apiVersion")


def test_foreign_kind_and_api_version() -> None:
    problem = only_problem(
        """
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: web}
        """
    )
    assert_one_line(problem, "in0.yaml", "Deployment/web", "apiVersion")


def test_wrong_type_names_field_and_line() -> None:
    problem = only_problem(
        """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridNetwork
        metadata:
          name: grid-demo
        spec:
          swim:
            gossipNodes: "3"
        """
    )
    assert_one_line(problem, "in0.yaml", "GridNetwork/grid-demo", "spec.swim.gossipNodes")
    assert problem.line == 8


def test_out_of_range_threshold() -> None:
    problem = only_problem(
        """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridNetwork
        metadata: {name: grid-demo}
        spec:
          admission:
            existingOnly: {queueDepth: 0.95, kvCache: 0.9}
            excluded: {queueDepth: 0.9, kvCache: 0.98}
        """
    )
    assert_one_line(
        problem, "in0.yaml", "GridNetwork/grid-demo", "spec.admission.existingOnly.queueDepth"
    )


def test_every_invalid_field_of_a_resource_is_reported() -> None:
    found = problems(
        NETWORK,
        """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: InferenceProvider
        metadata: {name: p}
        spec:
          gridNetworkRef: grid-demo
          backendKind: moon
          providerKind: open_ai
          models: [{name: m, contextWindow: -1}]
          colour: blue
        """,
    )
    fields = {p.field for p in found}
    assert fields == {"spec.backendKind", "spec.models[0].contextWindow", "spec.colour"}
    assert all(p.resource == "InferenceProvider/p" for p in found)


def test_duplicate_names_of_the_same_kind() -> None:
    site = """
    apiVersion: grid.praxis-proxy.io/v1alpha1
    kind: GridSite
    metadata: {name: east}
    spec: {gridNetworkRef: grid-demo}
    """
    problem = only_problem(NETWORK, site, site)
    assert_one_line(problem, "in2.yaml", "GridSite/east", "metadata.name")
    assert "in1.yaml" in problem.message


def test_same_name_in_different_kinds_is_fine() -> None:
    manifests = parse(
        NETWORK,
        """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridSite
        metadata: {name: grid-demo}
        spec: {gridNetworkRef: grid-demo}
        """,
    )
    assert "grid-demo" in manifests.sites


def test_dangling_grid_network_ref() -> None:
    problem = only_problem(
        NETWORK,
        """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: InferenceProvider
        metadata: {name: p}
        spec:
          gridNetworkRef: grid-elsewhere
          backendKind: local
          providerKind: self_hosted
          models: [{name: m}]
        """,
    )
    assert_one_line(problem, "in1.yaml", "InferenceProvider/p", "spec.gridNetworkRef")
    assert "grid-elsewhere" in problem.message


def test_invalid_network_does_not_cascade_into_dangling_refs() -> None:
    found = problems(
        """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridNetwork
        metadata: {name: grid-demo}
        spec: {swim: {gossipNodes: 0}}
        """,
        """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridSite
        metadata: {name: east}
        spec: {gridNetworkRef: grid-demo}
        """,
    )
    assert [p.field for p in found] == ["spec.swim.gossipNodes"]


def test_secret_missing_the_referenced_key_never_prints_values() -> None:
    problem = only_problem(
        """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridNetwork
        metadata: {name: grid-demo}
        spec:
          tls:
            swimKeyRef: {name: swim, namespace: grid-system, key: swim.key}
        ---
        apiVersion: v1
        kind: Secret
        metadata: {name: swim, namespace: grid-system}
        data: {other.key: c2stc2VjcmV0LXZhbHVl}
        """
    )
    assert_one_line(problem, "in0.yaml", "GridNetwork/grid-demo", "spec.tls.swimKeyRef.key")
    assert "c2stc2VjcmV0LXZhbHVl" not in str(problem)


def test_invalid_secret_never_prints_values() -> None:
    problem = only_problem(
        """
        apiVersion: v1
        kind: Secret
        metadata: {name: creds, namespace: grid-system}
        data: {token: "sk-not-base64!"}
        """
    )
    assert problem.resource == "Secret/creds"
    assert "sk-not-base64" not in str(problem)


def test_duplicate_secret_in_the_same_namespace() -> None:
    secret = """
    apiVersion: v1
    kind: Secret
    metadata: {name: creds, namespace: grid-system}
    stringData: {token: x}
    """
    problem = only_problem(secret, secret)
    assert problem.field == "metadata.name"


def test_problems_keep_input_order_and_error_lists_them_all() -> None:
    with pytest.raises(ManifestError) as info:
        parse(
            "kind: GridPlanet\napiVersion: grid.praxis-proxy.io/v1alpha1\nmetadata: {name: a}\n",
            "kind: GridMoon\napiVersion: grid.praxis-proxy.io/v1alpha1\nmetadata: {name: b}\n",
        )
    lines = str(info.value).splitlines()
    assert [line.split(":")[0] for line in lines] == ["in0.yaml", "in1.yaml"]
    assert info.value.path == "kind"


def test_duplicate_yaml_key_is_reported_not_silently_dropped() -> None:
    problem = only_problem(
        """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridNetwork
        metadata: {name: grid-demo}
        spec:
          region: us-east-1
          region: us-west-2
        """
    )
    assert_one_line(problem, "in0.yaml", "GridNetwork/grid-demo", "spec.region")
    assert problem.message == "duplicate key"
    assert problem.line == 7


def test_alias_bomb_is_refused_before_validation() -> None:
    lines = ["apiVersion: grid.praxis-proxy.io/v1alpha1", "kind: GridNetwork", "a0: &a0 [x, x]"]
    for i in range(1, 30):
        lines.append(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}]")
    lines.append("metadata: {name: bomb}")
    problem = only_problem("\n".join(lines) + "\n")
    assert "expands to more than" in problem.message
    assert problem.resource == "GridNetwork/bomb"


def test_kubectl_lists_are_unpacked_and_problems_point_at_the_item() -> None:
    text = """
    apiVersion: v1
    kind: List
    items:
      - apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridNetwork
        metadata: {name: grid-demo}
      - apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridSite
        metadata: {name: east}
        spec: {gridNetworkRef: grid-demo}
    """
    manifests = parse(text)
    assert list(manifests.sites) == ["east"]
    problem = only_problem(text.replace("gridNetworkRef: grid-demo", "gridNetworkRef: 7"))
    assert_one_line(problem, "in0.yaml", "GridSite/east", "spec.gridNetworkRef")
    assert problem.line == 11


def test_grid_kind_list_and_bad_items() -> None:
    problem = only_problem(
        """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridSiteList
        items: {}
        """
    )
    assert (problem.resource, problem.field) == ("GridSiteList", "items")
