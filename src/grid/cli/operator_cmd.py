"""``grid operator``: run one site operator against a resource store.

Every flag has a ``GRID_*`` environment fallback (for example ``--site`` and
``GRID_SITE``); docs/operator.md lists them with their defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

import click

from grid.adapters.store.url import open_store
from grid.errors import GridError
from grid.operator import logs
from grid.operator.runtime import Operator
from grid.operator.settings import (
    DEFAULT_METRICS_BIND,
    DEFAULT_SIGNALS_BIND,
    DEFAULT_STORE,
    DEFAULT_SWIM_BIND,
    OperatorSettings,
)

log = logging.getLogger("grid.operator")

_PATH = click.Path(path_type=Path, dir_okay=False, exists=True)


async def _serve(settings: OperatorSettings) -> None:
    store = await open_store(settings.store)
    operator = Operator(settings, store)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, operator.stop)
    try:
        await operator.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        await store.close()


@click.command("operator")
@click.option("--site", envvar="GRID_SITE", required=True, help="This operator's site name.")
@click.option(
    "--store",
    envvar="GRID_STORE",
    default=DEFAULT_STORE,
    show_default=True,
    help="Resource store: sqlite:PATH or kubernetes.",
)
@click.option(
    "--network", envvar="GRID_NETWORK", help="GridNetwork to serve (default: the only one)."
)
@click.option(
    "--swim-bind",
    envvar="GRID_SWIM_BIND",
    default=DEFAULT_SWIM_BIND,
    show_default=True,
    help="UDP+TCP host:port for SWIM and push-pull.",
)
@click.option("--swim-advertise", envvar="GRID_SWIM_ADVERTISE", help="host:port peers reach us at.")
@click.option(
    "--swim-key-file",
    envvar="GRID_SWIM_KEY_FILE",
    type=_PATH,
    help="32-byte SWIM key, used when the swimKeyRef Secret is absent.",
)
@click.option(
    "--metrics-bind",
    envvar="GRID_METRICS_BIND",
    default=DEFAULT_METRICS_BIND,
    show_default=True,
    help="host:port for /metrics, /healthz and /readyz.",
)
@click.option(
    "--overlay-dir",
    envvar="GRID_OVERLAY_DIR",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also write grid-config.json and grid-overlay.json here.",
)
@click.option("--ca", envvar="GRID_CA", type=_PATH, help="Grid CA certificate (PEM).")
@click.option("--cert", envvar="GRID_CERT", type=_PATH, help="This site's certificate (PEM).")
@click.option("--key", envvar="GRID_KEY", type=_PATH, help="This site's private key (PEM).")
@click.option(
    "--egress-bind", envvar="GRID_EGRESS_BIND", help="Serve an mTLS egress stand-in at host:port."
)
@click.option(
    "--record-refresh",
    "record_refresh_s",
    envvar="GRID_RECORD_REFRESH",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds between re-publishing own provider records.",
)
@click.option(
    "--site-probe-interval",
    "site_probe_interval_s",
    envvar="GRID_SITE_PROBE_INTERVAL",
    type=float,
    default=2.0,
    show_default=True,
    help="Seconds between GridSite reconciles and egress probes.",
)
@click.option(
    "--render-interval",
    "render_interval_s",
    envvar="GRID_RENDER_INTERVAL",
    type=click.FloatRange(min=0.05),
    default=1.0,
    show_default=True,
    help="Most seconds between renders (changes render sooner).",
)
@click.option(
    "--shutdown-timeout",
    "shutdown_timeout_s",
    envvar="GRID_SHUTDOWN_TIMEOUT",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Seconds a graceful stop may take (leaving the mesh first).",
)
@click.option(
    "--signals-bind",
    envvar="GRID_SIGNALS_BIND",
    default=DEFAULT_SIGNALS_BIND,
    show_default=True,
    help="host:port of the mTLS signals listener (bound only under signalTransport poll).",
)
@click.option(
    "--signals-poll-interval",
    "signals_poll_interval_s",
    envvar="GRID_SIGNALS_POLL_INTERVAL",
    type=click.FloatRange(min=0.05),
    default=2.0,
    show_default=True,
    help="Seconds between polls of each peer's signals (poll mode).",
)
@click.option(
    "--cert-check-interval",
    "cert_check_interval_s",
    envvar="GRID_CERT_CHECK_INTERVAL",
    type=click.FloatRange(min=0.05),
    default=5.0,
    show_default=True,
    help="Seconds between checks of --cert/--key for rotation (spiffe trust only).",
)
@click.option(
    "--ingest-feedback/--no-ingest-feedback",
    "ingest_feedback",
    envvar="GRID_INGEST_FEEDBACK",
    default=True,
    show_default=True,
    help="Serve POST /v1/site/signals/ingest under poll (off: the POST answers 405).",
)
@click.option(
    "--feedback-reporter-capacity",
    "feedback_reporter_capacity",
    envvar="GRID_FEEDBACK_REPORTER_CAPACITY",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Gateway reporters persisted per network; a new one past it gets 429.",
)
@click.option(
    "--feedback-write-attempts",
    "feedback_write_attempts",
    envvar="GRID_FEEDBACK_WRITE_ATTEMPTS",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Attempts in all of the feedback status write on store conflicts.",
)
@click.option(
    "--log-level",
    envvar="GRID_LOG_LEVEL",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def operator_cmd(log_level: str, **options: object) -> None:
    """Run one site operator: SWIM, controllers, scraping and the overlay renderer."""
    logs.configure(log_level)
    settings = OperatorSettings(**options)  # type: ignore[arg-type]
    try:
        asyncio.run(_serve(settings))
    except GridError as exc:
        log.error("operator failed", extra={"code": exc.code, "reason": exc.message})
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(1)
    except OSError as exc:
        log.error("operator failed", extra={"code": "os_error", "reason": exc.strerror or ""})
        click.echo(f"error: {exc.strerror or type(exc).__name__}", err=True)
        sys.exit(1)


def register(main: click.Group) -> None:
    """Add ``grid operator`` to the CLI."""
    main.add_command(operator_cmd)
