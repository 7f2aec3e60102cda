"""Grid's Prometheus rules: valid, unit-tested by promtool, shipped by the chart as they are,
and the Grafana dashboard is the one its builder makes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.testing.helm import CHART, REPO, render

RULES = REPO / "deploy" / "prometheus" / "grid-rules.yaml"
RULE_TESTS = sorted((REPO / "deploy" / "prometheus" / "tests").glob("*.yaml"))
OBSERVABILITY = CHART / "ci" / "observability-values.yaml"


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (make test installs Debian's prometheus)")
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, check=False, cwd=cwd, timeout=60
    )


def test_the_rules_are_valid_prometheus_rules() -> None:
    checked = _promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("tests", RULE_TESTS, ids=lambda p: p.stem)
def test_every_rule_passes_its_promtool_unit_tests(tests: Path) -> None:
    ran = _promtool("test", "rules", tests.name, cwd=tests.parent)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_every_alert_has_a_unit_test_and_a_severity() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    alerts = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    tested = {
        case["alertname"]
        for path in RULE_TESTS
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    }
    assert set(alerts) <= tested, sorted(set(alerts) - tested)
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, name


def _kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def test_the_chart_ships_the_same_rules_as_a_prometheusrule_off_by_default(
    tmp_path: Path,
) -> None:
    assert _kind(render(CHART / "ci" / "default-values.yaml"), "PrometheusRule") == []
    objs = render(OBSERVABILITY)
    (rule,) = _kind(objs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    rendered = tmp_path / "rendered-rules.yaml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    checked = _promtool("check", "rules", str(rendered))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (monitor,) = _kind(objs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["interval"] == "15s"


def test_the_dashboard_json_is_what_its_builder_makes() -> None:
    built = subprocess.run(
        [sys.executable, str(REPO / "deploy" / "grafana" / "build.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert built.returncode == 0, built.stderr
