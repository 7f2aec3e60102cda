"""RBAC proven minimal: the chart's rules grant every call the operator made, and no more.

Every Kubernetes-backed test of this suite records the operator's own requests
(the test harness's setup writes use another User-Agent) as (verb, group,
resource, namespace). This test runs after the rest of the suite and compares
that audit with the ClusterRole and Role that real helm renders from the chart.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from grid.testing.helm import CHART, render

from .conftest import OPERATOR_NAMESPACE

Grant = tuple[str, str, str]
"""(verb, group, resource)."""


def _grants(role: dict[str, Any]) -> set[Grant]:
    return {
        (verb, group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.after_operator_suite
def test_every_call_is_granted_and_every_grant_is_used(kube_audit: Counter[Any]) -> None:
    if not kube_audit:
        pytest.fail("no operator calls were recorded: run this test with all of tests/operator")
    objs = render(CHART / "ci" / "ha-values.yaml", OPERATOR_NAMESPACE)
    (cluster_role,) = [o for o in objs if o["kind"] == "ClusterRole"]
    (role,) = [o for o in objs if o["kind"] == "Role"]
    assert role["metadata"]["namespace"] == OPERATOR_NAMESPACE
    cluster, local = _grants(cluster_role), _grants(role)
    for rule in cluster_role["rules"] + role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
    denied = [
        call
        for call in kube_audit
        if call[:3] not in cluster and not (call[:3] in local and call[3] == OPERATOR_NAMESPACE)
    ]
    assert denied == [], f"calls the chart does not grant: {sorted(denied)}"
    used = {call[:3] for call in kube_audit}
    assert sorted((cluster | local) - used) == [], "rules granted but never used"
