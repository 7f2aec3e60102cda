"""The `grid` command line.

Each command family lives in its own module under `grid.cli` and exposes
``register(group)``. This module only assembles them, so families can grow
without touching each other.
"""

from __future__ import annotations

import importlib

import click

from grid import __version__

# Append-only list of command modules; each defines `register(main: click.Group)`.
COMMAND_MODULES: tuple[str, ...] = (
    "grid.cli.telemetry_cmd",
    "grid.cli.mock_provider_cmd",
    "grid.cli.resources_cmd",
    "grid.cli.routing_cmd",
    "grid.cli.certs_cmd",
    "grid.cli.operator_cmd",
    "grid.cli.store_cmd",
    "grid.cli.demo_cmd",
    "grid.cli.telemetry_send",
    "grid.cli.gateway_cmd",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="grid")
def main() -> None:
    """Grid: mesh AI inference backends across sites into one routable overlay."""


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(main)
