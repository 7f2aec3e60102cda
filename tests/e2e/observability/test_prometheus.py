"""Grid's rules and dashboard against a real Prometheus over a real demo.

One three-site demo (poll mode, so the feedback and ingest series exist) runs
for the module, with its gateways; a ``grid telemetry-gateway`` with
``--metrics-bind`` adds the telemetry series. Then:

* every metric name in ``deploy/prometheus/grid-rules.yaml`` and in every
  panel query of ``deploy/grafana/grid-dashboard.json`` is parsed out of its
  PromQL and found in a live ``/metrics`` (or is a recording rule of ours, or
  Prometheus' own ``up``);
* Debian's ``prometheus`` scrapes every operator and gateway (`grid.demo.prometheus`,
  the same code as ``grid demo --prometheus``) with a copy of the shipped rules
  whose ``for:`` is shortened; killing one site's operator makes its peers'
  ``GridSiteUnreachable`` go pending, then firing once its ``for:`` has passed,
  and restarting it resolves the alert. Everything is read through
  Prometheus' HTTP API.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import promql_parser
import pytest
import pytest_asyncio
import yaml
from prometheus_client.parser import text_string_to_metric_families

from grid.demo.mesh import DemoMesh
from grid.demo.prometheus import LocalPrometheus, scrape_config, shipped_rules
from grid.testing.poll import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "grid-dashboard.json"
FOR_S = 4.0
"""The test copy's ``for:`` of every rule (the shipped ones are minutes)."""
INTERVAL_S = 0.5
"""Scrape and rule evaluation interval of the test's Prometheus."""
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created"),
}


@dataclass
class Observed:
    """A running demo, what its listeners export, and the telemetry gateway's address."""

    mesh: DemoMesh
    names: set[str]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def observed(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Observed]:
    root = tmp_path_factory.mktemp("observed")
    mesh = DemoMesh(root / "mesh", ["east", "west", "central"], signal_transport="poll")
    telemetry: asyncio.subprocess.Process | None = None
    try:
        await mesh.prepare()
        await mesh.start()
        telemetry, metrics = await _telemetry_gateway(mesh, root / "telemetry")
        description = mesh.describe()
        addresses = [s["metrics"] for s in description["sites"].values()]
        addresses += [s["gateway_admin"] for s in description["sites"].values()]
        yield Observed(mesh, await _exported_names([*addresses, metrics]))
    finally:
        if telemetry is not None and telemetry.returncode is None:
            telemetry.terminate()
            await telemetry.wait()
        await mesh.stop()


async def _telemetry_gateway(mesh: DemoMesh, data: Path) -> tuple[asyncio.subprocess.Process, str]:
    """``grid telemetry-gateway`` with /metrics, on the demo's PKI; its metrics address."""
    assert mesh.pki is not None
    east = mesh.pki.sites["east"]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "grid", "telemetry-gateway",
        "--listen", "127.0.0.1:0", "--metrics-bind", "127.0.0.1:0",
        "--cert", str(east.cert), "--key", str(east.key), "--client-ca", str(mesh.pki.ca),
        "--data-dir", str(data),
        stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert process.stdout is not None
    async with asyncio.timeout(20):
        line = await process.stdout.readline()
    return process, str(json.loads(line)["metrics"])


async def _exported_names(addresses: list[str]) -> set[str]:
    """Every sample name each ``/metrics`` exports, families without samples included."""
    names: set[str] = set()
    async with aiohttp.ClientSession() as http:
        for address in addresses:
            async with http.get(f"http://{address}/metrics") as response:
                assert response.status == 200, address
                text = await response.text()
            for family in text_string_to_metric_families(text):
                names.add(family.name)
                names.update(family.name + s for s in SUFFIXES.get(family.type, ()))
                names.update(sample.name for sample in family.samples)
    return names


def _metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana's interval variable filled)."""
    parsed = promql_parser.parse(expression.replace("$__rate_interval", "5m"))
    found: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            found.add(node.name)

    promql_parser.walk(parsed, visit)
    return found


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(shipped_rules().read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]


async def test_every_rule_and_dashboard_query_reads_metrics_grid_exports(
    observed: Observed,
) -> None:
    recorded = {rule["record"] for rule in _rules() if "record" in rule}
    known = observed.names | recorded | {"up"}
    queries = [(r.get("alert") or r["record"], r["expr"]) for r in _rules()]
    queries += _dashboard_queries()
    assert len(queries) > 20
    for where, expression in queries:
        names = _metric_names(expression)
        assert names, f"{where}: {expression} selects no metric"
        unknown = names - known
        assert not unknown, f"{where} reads {sorted(unknown)}, which no live /metrics exports"


async def _alerts(http: aiohttp.ClientSession, url: str, name: str) -> list[dict[str, Any]]:
    async with http.get(f"{url}/api/v1/alerts") as response:
        payload = await response.json()
    return [a for a in payload["data"]["alerts"] if a["labels"]["alertname"] == name]


async def _targets_up(http: aiohttp.ClientSession, url: str, count: int) -> bool:
    async with http.get(f"{url}/api/v1/targets") as response:
        active = (await response.json())["data"]["activeTargets"]
    return len(active) == count and all(t["health"] == "up" for t in active)


def _fast_rules(path: Path) -> Path:
    """A copy of the shipped rules whose every ``for:`` is `FOR_S`."""
    document = yaml.safe_load(shipped_rules().read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = f"{FOR_S:g}s"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


async def test_a_killed_site_goes_pending_then_firing_and_resolves_after_restart(
    observed: Observed, tmp_path: Path
) -> None:
    mesh = observed.mesh
    prometheus = LocalPrometheus(tmp_path / "prometheus")
    config = scrape_config(mesh.describe(), [_fast_rules(tmp_path / "rules.yaml")], INTERVAL_S)
    url = await prometheus.start(config)
    loop = asyncio.get_running_loop()
    try:
        async with aiohttp.ClientSession() as http:
            targets = 2 * len(mesh.plan.sites)
            await eventually(lambda: _targets_up(http, url, targets), "every target up")  # type: ignore[arg-type]

            async def west(state: str) -> dict[str, Any] | None:
                alerts = await _alerts(http, url, "GridSiteUnreachable")
                return next(
                    (a for a in alerts if a["labels"]["site"] == "west" and a["state"] == state),
                    None,
                )

            assert await west("pending") is None and await west("firing") is None
            mesh.kill_operator("west")
            killed = loop.time()
            pending = await eventually(lambda: west("pending"), "pending", timeout_s=30)  # type: ignore[arg-type]
            pending_at = loop.time()
            firing = await eventually(lambda: west("firing"), "firing", timeout_s=FOR_S + 10)  # type: ignore[arg-type]
            fired_after = loop.time() - pending_at
            assert firing["labels"]["severity"] == "warning"
            assert firing["activeAt"] == pending["activeAt"]
            # Firing comes once `for:` has passed since it went pending, not before.
            assert fired_after <= FOR_S + 4 * INTERVAL_S + 1.0, fired_after
            print(f"\nwest killed: pending after {pending_at - killed:.1f} s, "
                  f"firing {fired_after:.1f} s later (for: {FOR_S:g}s)")  # fmt: skip

            await mesh.start_operator("west")

            async def resolved() -> bool:
                return not await _alerts(http, url, "GridSiteUnreachable")

            await eventually(resolved, "the alert resolves after the restart", timeout_s=40)  # type: ignore[arg-type]
    finally:
        await prometheus.stop()
