"""``grid render``, ``grid explain`` and ``grid overlay verify`` (SPEC-DECISIONS §9).

These are thin edges over the pure core: they read manifests and a signals file,
take the clock once, call `grid.core.routing.render` / `grid.core.routing.explain` /
`grid.core.overlay.verify`, and print. No network is touched. Invalid input
exits 2 with one line per problem; Secret values are never read, so they can
never be printed.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from grid.adapters.bounded_file import UnreadableFile, read_bounded
from grid.cli.resources_cmd import load_or_exit
from grid.core.json_document import DocumentError, DocumentUnreadable, decode_json
from grid.core.overlay import verify
from grid.core.resources.manifest import Manifests
from grid.core.routing.explain import ExplainRow, Explanation, explain
from grid.core.routing.render import AGENT_CAPABILITIES, RenderInputs, render
from grid.core.routing.signals import SignalsDocument, parse_signals
from grid.core.vocabulary import CandidateKind
from grid.errors import ValidationError

SIGNALS_FILE_BYTES_MAX = 16 * 1024 * 1024
"""Largest signals or overlay file read, in bytes; both are small JSON documents."""

EXPLAIN_WIDTH = 210
"""Columns of the explain table when stdout is not a terminal."""

EXIT_INVALID = 2
"""Exit status for invalid input (bad CRs, a bad signals file), as click uses for usage."""


def _fail(lines: list[str]) -> NoReturn:
    for line in lines:
        click.echo(f"error: {line}", err=True)
    sys.exit(EXIT_INVALID)


def read_json(path: str) -> Any:
    """Decode a JSON file within the size and depth bounds.

    Raises `UnreadableFile` (size, I/O) or `DocumentError` (syntax, depth, encoding).
    """
    return decode_json(read_bounded(path, SIGNALS_FILE_BYTES_MAX))


def _inputs(path: str) -> RenderInputs:
    manifests: Manifests = load_or_exit(path)  # exit 2, one line per problem
    return RenderInputs(
        networks=tuple(manifests.networks.values()),
        sites=tuple(manifests.sites.values()),
        providers=tuple(manifests.providers.values()),
        secrets=tuple(manifests.secrets.values()),
        agents=(*manifests.tool_providers.values(), *manifests.agent_providers.values()),
    )


def _signals(path: str | None) -> SignalsDocument | None:
    if path is None:
        return None
    try:
        return parse_signals(read_json(path))
    except UnreadableFile as exc:
        _fail([f"{path}: cannot read signals file: {exc.message}"])
    except DocumentError as exc:
        _fail([f"{path}: not a JSON signals document: {exc.message}"])
    except ValidationError as exc:
        _fail([f"{path}: {exc.message}"])


@click.command("render")
@click.option("-f", "--filename", "path", required=True, help="CR YAML file or directory.")
@click.option("--site", required=True, help="This operator's site (default provider site).")
@click.option("--gateway", required=True, help="Gateway name listed in spec.gatewayRefs.")
@click.option("--namespace", default=None, help="Gateway namespace (default: the gatewayRef's).")
@click.option("--signals", "signals_path", default=None, help="Signals document (§6, scope=grid).")
@click.option(
    "--capability",
    default=None,
    help="Only candidates whose model declares this capability; inference, agentTools or "
    "agentToAgent: only the models, the MCP tools or the A2A agents.",
)
def render_command(
    path: str,
    site: str,
    gateway: str,
    namespace: str | None,
    signals_path: str | None,
    capability: str | None,
) -> None:
    """Render the overlay envelope (grid-overlay.json) for one gateway to stdout."""
    inputs = _inputs(path)
    signals = _signals(signals_path)
    try:
        rendered = render(
            inputs,
            site=site,
            gateway=gateway,
            namespace=namespace,
            signals=signals,
            now=datetime.now(UTC),
            capability=capability,
        )
    except ValidationError as exc:
        _fail([exc.message])
    click.echo(json.dumps(rendered.envelope, indent=2))


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


_SIGNAL_COLUMNS = (
    ("locality", None, "locality"),
    ("queue", "queue_depth", "queue_depth"),
    ("kv", "kv_cache_utilization", "kv_cache"),
    ("prefix", "prefix_cache_hit_ratio", "prefix_cache"),
    ("p99 ms", "p99_latency_ms", "latency"),
    ("cost", "cost_per_million_input_tokens", "cost"),
)


def _signal_cell(row: ExplainRow, value_key: str | None, score_key: str) -> str:
    score = f"{row.signal_scores[score_key]:.2f}"
    if score_key in row.missing_signals:
        score += "*"
    if value_key is None:
        return score
    return f"{_fmt(row.signal_values[value_key], 4)}→{score}"


def _what(capability: str | None) -> str:
    return "candidates" if capability in AGENT_CAPABILITIES else "models"


def _where(row: ExplainRow) -> str:
    """``provider@site``, naming the tool or agent of a candidate that is no model."""
    where = f"{row.provider}@{row.site}"
    return (
        where if row.kind == CandidateKind.INFERENCE_MODEL else f"{where} ({row.kind} {row.model})"
    )


def _table(result: Explanation) -> Table:
    scoring = "on" if result.scoring_enabled else "off (poll)"
    if result.scored_by == "gateway":
        scoring += "; scored and ordered as the poll-mode gateway ranks, rank is the overlay's"
    subject = result.model or f"{_what(result.capability)} with {result.capability}"
    if result.model and result.capability:
        subject += f" ({result.capability})"
    table = Table(
        title=f"{subject} seen from site {result.local_site} "
        f"(network {result.network}, scoring {scoring})",
        caption="signal cells: raw value → score; * missing (neutral 0.5)",
    )
    headers = ("rank", "provider@site", "cluster", "backend", "status", "admission", "tier")
    for header in headers:
        table.add_column(header, overflow="fold")
    table.add_column("group", justify="right")
    table.add_column("fresh")
    table.add_column("score", justify="right")
    for header, _, _ in _SIGNAL_COLUMNS:
        table.add_column(header, justify="right", no_wrap=True)
    for row in result.rows:
        table.add_row(
            "-" if row.rank is None else str(row.rank),
            _where(row),
            row.cluster,
            row.backend_kind,
            row.status,
            row.admission_state,
            row.selection_tier,
            "-" if row.selection_group is None else str(row.selection_group),
            "yes" if row.fresh else "no",
            "-" if row.score is None else f"{row.score:.4f}",
            *(_signal_cell(row, v, s) for _, v, s in _SIGNAL_COLUMNS),
        )
    return table


def _print_table(result: Explanation) -> None:
    probe = Console(file=sys.stdout)
    # A pipe or a file has no width; use one wide enough that rows stay on one line.
    console = Console(file=sys.stdout, width=probe.width if probe.is_terminal else EXPLAIN_WIDTH)
    if not result.rows:
        what = f"model {result.model!r}" if result.model else "any model"
        if result.capability:
            what += f" with capability {result.capability!r}"
        console.print(f"no candidates serve {what}")
        return
    console.print(_table(result))
    for row in result.rows:
        where = f"rank {row.rank}" if row.rank is not None else row.status
        console.print(f"[bold]{row.provider}@{row.site}[/bold] ({where}): {row.reason}")
        if row.group_reason:
            console.print(f"    {row.group_reason}")
        if row.credential is not None:
            ref = row.credential["secretRef"]
            console.print(
                f"    credential: {row.credential['strategy']} from Secret "
                f"{ref['namespace']}/{ref['name']} key {ref['key']} (a reference only)"
            )
        for note in row.notes:
            console.print(f"    note: {note}")


@click.command("explain")
@click.option("-f", "--filename", "path", required=True, help="CR YAML file or directory.")
@click.option("--site", required=True, help="The site whose point of view is explained.")
@click.option(
    "--model",
    default=None,
    help="The model, tool or agent to explain (needs this or --capability).",
)
@click.option(
    "--capability",
    default=None,
    help="Only models declaring this capability (all of them without --model); inference, "
    "agentTools or agentToAgent: every model, MCP tool or A2A agent.",
)
@click.option("--signals", "signals_path", default=None, help="Signals document (§6, scope=grid).")
@click.option("--gateway", default=None, help="Explain for this gateway's local site instead.")
@click.option(
    "--as-gateway",
    is_flag=True,
    help="Under poll mode, show the order and scores the gateway ranks by.",
)
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def explain_command(
    path: str,
    site: str,
    model: str | None,
    capability: str | None,
    signals_path: str | None,
    gateway: str | None,
    as_gateway: bool,
    output: str,
) -> None:
    """Show every candidate for MODEL, excluded ones too, and why each ranks where it does."""
    if model is None and capability is None:
        _fail(["give --model, --capability or both"])
    inputs = _inputs(path)
    signals = _signals(signals_path)
    try:
        result = explain(
            inputs,
            site=site,
            model=model,
            signals=signals,
            gateway=gateway,
            capability=capability,
            as_gateway=as_gateway,
        )
    except ValidationError as exc:
        _fail([exc.message])
    if output == "json":
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        _print_table(result)


@click.group("overlay")
def overlay_group() -> None:
    """Inspect rendered overlays."""


@overlay_group.command("verify")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--network", default=None, help="Expected scope.network.")
@click.option("--gateway", default=None, help="Expected scope.gateway.")
@click.option("--namespace", default=None, help="Expected scope.namespace.")
@click.option("--local-site", default=None, help="Expected scope.local_site.")
def verify_command(
    file: str,
    network: str | None,
    gateway: str | None,
    namespace: str | None,
    local_site: str | None,
) -> None:
    """Verify an overlay envelope (or a bare overlay).

    Exit 0 on accept, 1 on reject, 2 when the file cannot be read at all (too large,
    unreadable, not UTF-8, nested past the depth bound).
    """
    expected = {
        "network": network,
        "gateway": gateway,
        "namespace": namespace,
        "local_site": local_site,
    }
    try:
        document: Any = read_json(file)
    except (UnreadableFile, DocumentUnreadable) as exc:
        _fail([f"{file}: cannot read overlay: {exc.message}"])
    except DocumentError:
        document = None  # readable text that is not JSON: a malformed structure
    verdict = verify(document, expected)
    click.echo(json.dumps(verdict.as_dict()))
    if not verdict.accepted:
        click.echo(f"reject ({verdict.reason}): {verdict.detail}", err=True)
        sys.exit(1)


def register(main: click.Group) -> None:
    """Add ``render``, ``explain`` and ``overlay verify`` to the ``grid`` group."""
    main.add_command(render_command)
    main.add_command(explain_command)
    main.add_command(overlay_group)
