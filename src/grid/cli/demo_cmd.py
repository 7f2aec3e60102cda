"""``grid demo``: a live local mesh on loopback, the embedded default.

It starts one operator process per site, each with its own SQLite store, a dev
PKI and encrypted SWIM, plus mock providers under changing load and one
``grid gateway`` per site, then shows each site's ranked candidates and the
requests routed to each as they change. ``--traffic R`` sends R chat
completions a second through the gateways; ``--prometheus`` also runs a local
Prometheus over every site with Grid's alert rules and prints its URL. Ctrl-C
(or ``--duration``) stops every child process.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import aiohttp
import click
from rich.console import Console, Group
from rich.live import Live

from grid.adapters.stop_signals import stop_event
from grid.demo.live import DemoLiveView, site_addresses
from grid.demo.load import drive
from grid.demo.mesh import DemoMesh
from grid.demo.plan import API_MODEL, MODEL, NETWORK
from grid.demo.ports import port_range
from grid.demo.prometheus import (
    LocalPrometheus,
    PrometheusUnavailable,
    scrape_config,
    shipped_rules,
)
from grid.demo.table import budget_status, budget_table, mesh_view
from grid.demo.traffic import DEFAULT_RATE, send_traffic

DEFAULT_SITES = ("east", "west", "central")
PROMETHEUS_INTERVAL_S = 5.0
"""Scrape and rule evaluation interval of ``--prometheus``: quick enough to watch an
alert go pending then firing, light enough for a laptop."""


async def _run(
    root: Path,
    sites: list[str],
    duration: float | None,
    traffic: float,
    transport: str,
    console: Console,
    prometheus: bool = False,
) -> None:
    mesh = DemoMesh(root, sites, signal_transport=transport)
    local_prometheus = LocalPrometheus(root / "prometheus") if prometheus else None
    stop = stop_event()
    loop = asyncio.get_running_loop()
    load: asyncio.Task[None] | None = None
    web_view: DemoLiveView | None = None
    routed: asyncio.Task[None] | None = None
    try:
        console.print(f"[bold]grid demo[/]: preparing {len(sites)} sites under {root}")
        await mesh.prepare()
        await mesh.start()
        web_view = DemoLiveView(site_addresses(mesh.describe()), mesh.routed_counts)
        mesh.ui_url = await web_view.start()
        if local_prometheus is not None:
            config = scrape_config(mesh.describe(), [shipped_rules()], PROMETHEUS_INTERVAL_S)
            mesh.prometheus_url = await local_prometheus.start(config)
        path = mesh.write_description()
        console.print(f"mesh is up; reach it through {path}")
        console.print(f"live view: {mesh.ui_url}")
        if mesh.prometheus_url is not None:
            console.print(f"prometheus: {mesh.prometheus_url}/alerts (Grid's alert rules)")
        console.print(
            f"signal transport: {transport}"
            + ("; local scoring is off, candidates carry no score" if transport == "poll" else "")
        )
        gateways = [a for a in map(mesh.gateway_address, mesh.plan.sites) if a is not None]
        if gateways:
            console.print(f"gateways: {', '.join(gateways)} (try the curl in the README)")
            agents = mesh.plan.agent_description(gateways[0])
            console.print(f"tools (MCP): {agents['mcp']}; agent (A2A): {agents['a2a']}")
        load = asyncio.create_task(drive([pp.port for pp in mesh.plan.providers], MODEL))
        routed = asyncio.create_task(
            send_traffic(gateways, traffic, (MODEL, API_MODEL), mesh.api_keys)
        )
        dirs = {name: s.overlay_dir for name, s in mesh.plan.sites.items()}
        stores = {name: s.store for name, s in mesh.plan.sites.items()}
        scoring = transport != "poll"
        deadline = None if duration is None else loop.time() + duration
        view = mesh_view(dirs, scoring=scoring)
        async with aiohttp.ClientSession() as http:
            with Live(view, console=console, refresh_per_second=2) as live:
                while not stop.is_set() and (deadline is None or loop.time() < deadline):
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(1.0):
                            await stop.wait()
                    counts = await mesh.routed_counts(http)
                    view = mesh_view(dirs, counts, scoring=scoring)
                    live.update(Group(view, budget_table(await budget_status(stores, NETWORK))))
    finally:
        for task in (load, routed):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        console.print("stopping every process of the demo...")
        if web_view is not None:
            await web_view.stop()
        if local_prometheus is not None:
            await local_prometheus.stop()
        await mesh.stop()


@click.command("demo")
@click.option(
    "--sites",
    "site_count",
    type=click.IntRange(1, 9),
    default=3,
    show_default=True,
    help="How many sites (east, west, central, then site-4...).",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=1),
    help="Run this many seconds, then stop and exit 0 (non-interactive).",
)
@click.option(
    "--signal-transport",
    type=click.Choice(["gossip", "poll"]),
    default="gossip",
    show_default=True,
    help="How load signals cross sites.",
)
@click.option(
    "--dir",
    "root",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path(".grid/demo"),
    show_default=True,
    help="Where the demo keeps its PKI, stores, overlays and logs.",
)
@click.option(
    "--traffic",
    type=click.FloatRange(min=0, max=1000),
    default=DEFAULT_RATE,
    show_default=True,
    help="Chat completions per second sent through the gateways (half streaming); 0 = none.",
)
@click.option(
    "--prometheus",
    is_flag=True,
    help="Also run Prometheus (Debian's binary) over every site with Grid's alert rules.",
)
def demo_cmd(
    site_count: int,
    duration: float | None,
    signal_transport: str,
    root: Path,
    traffic: float,
    prometheus: bool,
) -> None:
    """Run a live local mesh: operators, mock providers and a live ranked table."""
    names = [*DEFAULT_SITES, *(f"site-{i}" for i in range(4, 10))][:site_count]
    try:
        port_range()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        asyncio.run(_run(root, names, duration, traffic, signal_transport, Console(), prometheus))
    except TimeoutError as exc:
        click.echo(f"error: {exc}; see the logs under {root / 'logs'}", err=True)
        sys.exit(1)
    except PrometheusUnavailable as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(1)


def register(main: click.Group) -> None:
    """Add ``grid demo`` to the CLI."""
    main.add_command(demo_cmd)
