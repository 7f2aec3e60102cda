"""The `grid` command line.

Each command family lives in its own module under `grid.cli` and exposes
``register(group)``. This module only assembles them, so families can grow
without touching each other.
"""

from __future__ import annotations

import click

from grid import __version__
from grid.cli import (
    certs_cmd,
    demo_cmd,
    gateway_cmd,
    keys_cmd,
    mock_provider_cmd,
    operator_cmd,
    resources_cmd,
    routing_cmd,
    store_cmd,
    telemetry_cmd,
    telemetry_send,
)

COMMAND_MODULES = (
    telemetry_cmd,
    mock_provider_cmd,
    resources_cmd,
    routing_cmd,
    certs_cmd,
    operator_cmd,
    store_cmd,
    demo_cmd,
    telemetry_send,
    gateway_cmd,
    keys_cmd,
)
"""The command families, in the order `grid --help` lists them; each defines
``register(main: click.Group)``."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="grid")
def main() -> None:
    """Grid: mesh AI inference backends across sites into one routable overlay."""


for _module in COMMAND_MODULES:
    _module.register(main)
