"""`grid gateway --config praxis.yaml`: the reference routing gateway (§11).

It runs the praxis.yaml the operator renders and routes OpenAI-compatible
requests by the overlay; SIGTERM drains in-flight requests within the file's
``shutdown_timeout_secs``. A config or cold-start overlay that does not verify
exits 2 with the reason, before any listener opens. With ``--operator`` (and
the site's ``--cert``, ``--key`` and the grid ``--ca``) the gateway runs in
poll mode: it polls the operator's ``GET /v1/site/signals?scope=grid`` and
ranks candidates by the §4 score within each admission/tier/freshness group.

``--workers N`` runs N gateway processes sharing the public port
(``SO_REUSEPORT``) under a supervisor that serves their summed admin endpoints
and restarts a worker that exits (`grid.gateway.workers`); the default is one
per usable core, at most one per public connection slot. ``--workers 1`` is the
single process, with no supervisor.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import click

from grid.adapters.runtime_internals import freeze_startup_heap
from grid.adapters.stop_signals import stop_event
from grid.adapters.tracing import GATEWAY_SAMPLE_RATIO, SERVICE_GATEWAY, start_tracing
from grid.core.address import parse_address
from grid.errors import ValidationError
from grid.gateway.config import ConfigError, load_config
from grid.gateway.server import Gateway
from grid.gateway.settings import GatewaySettings
from grid.gateway.signals_poll import SiteCredentials
from grid.gateway.snapshot import OverlayRejected
from grid.gateway.workers import Supervisor, WorkerFailed, worker_count
from grid.operator.logs import configure as configure_logs

WORKER_COMMAND = (sys.executable, "-m", "grid.cli.gateway_worker")
"""How the supervisor starts one worker (`grid.cli.gateway_worker`)."""


async def _serve(gateway: Gateway | Supervisor) -> None:
    public, admin = await gateway.start()
    freeze_startup_heap()  # the process serves from here on: its start-up heap lasts
    workers = len(gateway.slots) if isinstance(gateway, Supervisor) else 1
    click.echo(f"grid gateway serving on {public} (admin {admin}, workers {workers})")
    stop = stop_event()
    try:
        await stop.wait()
    finally:
        await gateway.stop()


@click.command("gateway")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="The praxis.yaml to run (as the operator renders it).",
)
@click.option(
    "--operator",
    envvar="GRID_GATEWAY_OPERATOR",
    help="The operator's signals listener HOST:PORT; turns on poll mode.",
)
@click.option(
    "--cert",
    envvar="GRID_GATEWAY_CERT",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Site certificate PEM (poll mode).",
)
@click.option(
    "--key",
    envvar="GRID_GATEWAY_KEY",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Site key PEM (poll mode).",
)
@click.option(
    "--ca",
    envvar="GRID_GATEWAY_CA",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Grid CA PEM that signs the operator's certificate (poll mode).",
)
@click.option(
    "--tenant-header",
    default="x-grid-tenant",
    show_default=True,
    envvar="GRID_GATEWAY_TENANT_HEADER",
    help="Request header naming the tenant whose budget a request spends.",
)
@click.option(
    "--mcp-path",
    default="/mcp",
    show_default=True,
    envvar="GRID_GATEWAY_MCP_PATH",
    help="Path where the public listener serves MCP (tool providers stay at their /mcp).",
)
@click.option(
    "--budgets",
    "budgets_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The budget view to enforce (default: grid-budgets.json beside the overlay file).",
)
@click.option(
    "--otlp-endpoint",
    envvar="GRID_GATEWAY_OTLP_ENDPOINT",
    help=(
        "OTLP/HTTP base URL to export traces to (/v1/traces is appended); absent means "
        "OTEL_EXPORTER_OTLP_ENDPOINT, and without either tracing is off."
    ),
)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar="GRID_GATEWAY_STATE_DIR",
    help="Directory where a graceful stop saves the tenant token counters for the next start.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    envvar="GRID_GATEWAY_WORKERS",
    help=(
        "Gateway processes sharing the public port (SO_REUSEPORT), each with an equal share "
        "of the connection cap, under a supervisor that sums their /metrics and restarts one "
        "that exits. Default: the usable cores, at most the connection cap. 1: one process."
    ),
)
def gateway_cmd(
    config_path: Path,
    operator: str | None,
    cert: Path | None,
    key: Path | None,
    ca: Path | None,
    tenant_header: str,
    mcp_path: str,
    budgets_file: Path | None,
    otlp_endpoint: str | None,
    state_dir: Path | None,
    workers: int | None,
) -> None:
    """Route OpenAI-compatible requests by the overlay, as praxis.yaml describes."""
    credentials = None
    if operator is not None:
        if cert is None or key is None or ca is None:
            click.echo("error: --operator needs --cert, --key and --ca", err=True)
            sys.exit(2)
        try:
            parse_address(operator)
        except ValidationError:
            click.echo("error: --operator must be HOST:PORT", err=True)
            sys.exit(2)
        credentials = SiteCredentials(cert, key, ca)
    elif cert is not None or key is not None or ca is not None:
        click.echo("error: --cert, --key and --ca are for poll mode; add --operator", err=True)
        sys.exit(2)
    configure_logs("info")
    try:
        settings = GatewaySettings(
            tenant_header=tenant_header,
            mcp_path=mcp_path,
            budgets_file=str(budgets_file) if budgets_file is not None else None,
            state_dir=str(state_dir) if state_dir is not None else None,
        )
    except ValueError as exc:
        click.echo(f"error: --mcp-path: {exc}", err=True)
        sys.exit(2)
    count = worker_count(workers, settings.listener.connections_max)
    try:
        if count == 1:
            _run(_single(config_path, settings, operator, credentials, otlp_endpoint))
        else:
            config = load_config(config_path, settings.config_max_bytes)
            supervisor = Supervisor(
                config, settings, config_path, WORKER_COMMAND, count,
                operator=operator, credentials=credentials, otlp_endpoint=otlp_endpoint,
            )  # fmt: skip
            _run(lambda: asyncio.run(_serve(supervisor)))
    except ConfigError as exc:
        click.echo(f"error: {config_path}: {exc}", err=True)
        sys.exit(2)
    except OverlayRejected as exc:
        click.echo(
            f"error: the overlay file does not verify ({exc.reason}); not starting", err=True
        )
        sys.exit(2)
    except WorkerFailed as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(1 if exc.kind == "listen" else 2)
    except (OSError, ValueError) as exc:
        click.echo(f"error: cannot prepare the gateway: {type(exc).__name__}: {exc}", err=True)
        sys.exit(2)


def _single(
    config_path: Path,
    settings: GatewaySettings,
    operator: str | None,
    credentials: SiteCredentials | None,
    otlp_endpoint: str | None,
) -> Callable[[], None]:
    """The one-process gateway, built (config and overlay verified) and ready to run."""
    # Before the gateway is built: its listeners take the tracing middleware then.
    tracing = start_tracing(SERVICE_GATEWAY, otlp_endpoint, sample_ratio=GATEWAY_SAMPLE_RATIO)
    try:
        config = load_config(config_path, settings.config_max_bytes)
        gateway = Gateway(config, settings, config_path, operator, credentials)
    except BaseException:
        if tracing is not None:
            tracing.shutdown()
        raise

    def run() -> None:
        try:
            asyncio.run(_serve(gateway))
        finally:
            if tracing is not None:
                tracing.shutdown()

    return run


def _run(serve: Callable[[], None]) -> None:
    """Serve until stopped; a listener that cannot bind exits 1."""
    try:
        serve()
    except OSError as exc:
        click.echo(f"error: cannot listen: {exc.strerror}", err=True)
        sys.exit(1)


def register(main: click.Group) -> None:
    """Add ``grid gateway`` to the CLI."""
    main.add_command(gateway_cmd)
