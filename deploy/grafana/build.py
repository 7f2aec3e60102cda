"""Build deploy/grafana/grid-dashboard.json with grafana-foundation-sdk.

    .venv/bin/python deploy/grafana/build.py          # rewrite the JSON
    .venv/bin/python deploy/grafana/build.py --check  # exit 1 if it is out of date

One row per concern (membership, convergence, ranking, traffic, selection,
budgets, telemetry, feedback), every query over a metric Grid exports or a
recording rule of deploy/prometheus/grid-rules.yaml; the end-to-end test
(tests/e2e/observability/test_prometheus.py) finds each name in a live
``/metrics``. The data source is a variable, so the JSON imports into any
Grafana with a Prometheus data source.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.timeseries import Panel as TimeSeries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

OUT = Path(__file__).with_name("grid-dashboard.json")
SOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"

# (row, [(title, unit, [(expr, legend)])]); a panel of one instant value is a stat.
ROWS: list[tuple[str, list[tuple[str, str, list[tuple[str, str]]]]]] = [
    (
        "Membership",
        [
            (
                "SWIM members by state",
                "short",
                [
                    ("sum by (instance, state) (grid_swim_members)", "{{instance}} {{state}}"),
                ],
            ),
            (
                "Sites Active, as each operator sees them",
                "short",
                [
                    ("grid:sites_active:count", "{{instance}}"),
                ],
            ),
            (
                "Sites Unreachable or Left",
                "short",
                [
                    (
                        'sum by (site, phase) (grid_site_phase{phase=~"Unreachable|Left"})',
                        "{{site}} {{phase}}",
                    ),
                ],
            ),
            (
                "SWIM frames dropped, by reason",
                "pps",
                [
                    (
                        f"sum by (reason) (rate(grid_swim_frames_dropped_total[{RATE}]))",
                        "{{reason}}",
                    ),
                ],
            ),
        ],
    ),
    (
        "Convergence",
        [
            (
                "Push-pull exchanges, by outcome",
                "ops",
                [
                    (
                        f"sum by (outcome) (rate(grid_swim_push_pull_exchanges_total[{RATE}]))",
                        "{{outcome}}",
                    ),
                ],
            ),
            (
                "Gossiped items dropped, by reason",
                "ops",
                [
                    (
                        f"sum by (reason) (rate(grid_swim_items_dropped_total[{RATE}]))",
                        "{{reason}}",
                    ),
                ],
            ),
            (
                "Items awaiting their origin's certificate",
                "short",
                [
                    ("sum by (instance) (grid_swim_items_pending)", "{{instance}}"),
                ],
            ),
            (
                "GridNetwork Degraded",
                "short",
                [
                    (
                        'max by (instance, network) (grid_network_phase{phase="Degraded"})',
                        "{{instance}} {{network}}",
                    ),
                ],
            ),
        ],
    ),
    (
        "Ranking",
        [
            (
                "Overlay renders, by result",
                "ops",
                [
                    (
                        f"sum by (instance, result) (rate(grid_overlay_renders_total[{RATE}]))",
                        "{{instance}} {{result}}",
                    ),
                ],
            ),
            (
                "Render round p90",
                "s",
                [
                    (
                        "histogram_quantile(0.9, sum by (le, instance) "
                        f'(rate(grid_reconcile_duration_seconds_bucket{{loop="render"}}[{RATE}])))',
                        "{{instance}}",
                    ),
                ],
            ),
            (
                "Rounds failing in a row",
                "short",
                [
                    ("max by (instance) (grid_overlay_failed_rounds)", "{{instance}}"),
                ],
            ),
            (
                "Stale clusters (candidates not fresh)",
                "short",
                [
                    (
                        "max by (site, cluster) (1 - grid_overlay_candidate_fresh)",
                        "{{site}} {{cluster}}",
                    ),
                ],
            ),
        ],
    ),
    (
        "Traffic",
        [
            (
                "Gateway requests, by outcome",
                "reqps",
                [
                    ("sum by (outcome) (grid:gateway_requests:rate5m)", "{{outcome}}"),
                ],
            ),
            (
                "Attempts, by cluster",
                "reqps",
                [
                    (
                        f"sum by (cluster) (rate(grid_gateway_upstream_requests_total[{RATE}]))",
                        "{{cluster}}",
                    ),
                ],
            ),
            (
                "Failover ratio",
                "percentunit",
                [
                    ("grid:gateway_failover_ratio:rate5m", "{{instance}}"),
                ],
            ),
            (
                "Open client connections",
                "short",
                [
                    ("sum by (instance) (grid_gateway_connections_open)", "{{instance}}"),
                ],
            ),
        ],
    ),
    (
        "Selection",
        [
            (
                "Share of attempts, by cluster",
                "percentunit",
                [
                    (
                        f"sum by (cluster) (rate(grid_gateway_upstream_requests_total[{RATE}])) "
                        f"/ ignoring(cluster) group_left "
                        f"sum(rate(grid_gateway_upstream_requests_total[{RATE}]))",
                        "{{cluster}}",
                    ),
                ],
            ),
            (
                "Session bindings",
                "short",
                [
                    ("sum by (instance) (grid_gateway_affinity_bindings)", "{{instance}}"),
                ],
            ),
            (
                "Candidates in each gateway's snapshot",
                "short",
                [
                    ("grid_gateway_candidates", "{{instance}}"),
                ],
            ),
            (
                "Signals polls (poll mode), by outcome",
                "ops",
                [
                    (
                        f"sum by (outcome) (rate(grid_gateway_signals_polls_total[{RATE}]))",
                        "{{outcome}}",
                    ),
                ],
            ),
        ],
    ),
    (
        "Budgets",
        [
            (
                "Spend over cap, by tenant",
                "percentunit",
                [
                    ("grid:budget_spend_ratio:max", "{{tenant}}"),
                ],
            ),
            (
                "Tokens, by tenant and direction",
                "short",
                [
                    (
                        "sum by (tenant, direction) "
                        f"(rate(grid_gateway_tenant_tokens_total[{RATE}]))",
                        "{{tenant}} {{direction}}",
                    ),
                ],
            ),
        ],
    ),
    (
        "Telemetry",
        [
            (
                "Admission requests, by outcome",
                "reqps",
                [
                    (
                        f"sum by (outcome) (rate(grid_telemetry_batches_total[{RATE}]))",
                        "{{outcome}}",
                    ),
                ],
            ),
            (
                "Refused share",
                "percentunit",
                [
                    ("grid:telemetry_refused_ratio:rate5m", "{{instance}}"),
                ],
            ),
        ],
    ),
    (
        "Feedback",
        [
            (
                "Feedback events at the operator",
                "ops",
                [
                    (
                        f"sum by (event) (rate(grid_gateway_feedback_events_total[{RATE}]))",
                        "{{event}}",
                    ),
                ],
            ),
            (
                "Overlay reloads at the gateways, by result",
                "ops",
                [
                    (
                        f"sum by (result) (rate(grid_gateway_overlay_reloads_total[{RATE}]))",
                        "{{result}}",
                    ),
                ],
            ),
            (
                "Rejected ingests reported (poll mode)",
                "short",
                [
                    ("sum by (instance) (grid_gateway_ingest_rejected)", "{{instance}}"),
                ],
            ),
            (
                "Reports awaiting acknowledgement",
                "short",
                [
                    ("sum by (instance) (grid_gateway_feedback_pending)", "{{instance}}"),
                ],
            ),
        ],
    ),
]


def _panel(title: str, unit: str, queries: list[tuple[str, str]], width: int) -> TimeSeries:
    panel = TimeSeries().title(title).datasource(SOURCE).unit(unit).span(width).height(8)
    for index, (expr, legend) in enumerate(queries):
        panel = panel.with_target(
            Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + index))
        )
    return panel


def dashboard() -> dict[str, object]:
    """The dashboard as Grafana's JSON model."""
    board = (
        Dashboard("Grid")
        .uid("grid-overview")
        .description("Membership, convergence, ranking, traffic, selection, budgets, telemetry")
        .tags(["grid"])
        .refresh("30s")
        .time("now-1h", "now")
        .with_variable(DatasourceVariable("datasource").label("Data source").type("prometheus"))
    )
    for row, panels in ROWS:
        board = board.with_row(Row(row))
        width = 24 // len(panels) if len(panels) <= 4 else 6
        for title, unit, queries in panels:
            board = board.with_panel(_panel(title, unit, queries, width))
    built = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    assert isinstance(built, dict)
    return built


def render() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if OUT.read_text() != text:
            print(f"{OUT} is out of date: run {sys.argv[0]}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
