"""`grid telemetry-gateway` and `grid telemetry roster|records` (SPEC-DECISIONS §9).

``telemetry-gateway`` runs the seed-004 admission gateway. Every admission
setting is also a flag (``--request-body-bytes-max`` and so on) and a config
file key; flags override the file. It prints one JSON readiness line on stdout
once listening and exits 0 on SIGTERM.

``telemetry roster`` appends to the roster log, which a running gateway picks
up within 1 s, and ``telemetry records`` prints every durably published record
as one JSON object per line for audits. ``telemetry send`` is registered onto
the same ``telemetry`` group by `grid.cli.telemetry_send`.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from grid.adapters.backbone import BackboneUnavailable, RosterLog
from grid.adapters.backbone.sqlite import BACKBONE_FILE
from grid.core.telemetry.roster import Roster, RosterState
from grid.core.telemetry.settings import GatewaySettings
from grid.errors import GridError, ValidationError
from grid.operator import logs
from grid.telemetry.audit import record_json
from grid.telemetry.backbones import open_backbone, open_roster
from grid.telemetry.config import DEFAULT_DATA_DIR, build_config, read_config_file
from grid.telemetry.service import serve

F = TypeVar("F", bound=Callable[..., Any])
_TYPES: dict[str, Any] = {"int": click.INT, "float": click.FLOAT}


def _usage_error(exc: ValidationError) -> click.UsageError:
    """A refused setting as a usage line naming its flag (and its config file key)."""
    if not exc.path:
        return click.UsageError(exc.message)
    key = exc.path.rsplit(".", 1)[-1]
    hint = f"'--{key.replace('_', '-')}' (or {key!r} in --config)"
    reason = exc.message.removeprefix(f"{exc.path}: ")
    if reason == "required":
        return click.MissingParameter(param_hint=hint, param_type="option")
    return click.BadParameter(reason, param_hint=hint)


def _setting_options(fn: F) -> F:
    """Add one ``--flag`` per `GatewaySettings` field, documented from the field."""
    for name, field in reversed(list(GatewaySettings.model_fields.items())):
        kind = getattr(field.annotation, "__name__", "str")
        default = "host name" if field.default is None else field.default
        fn = click.option(
            f"--{name.replace('_', '-')}",
            name,
            type=_TYPES.get(kind, click.STRING),
            default=None,
            help=f"{field.description} [default: {default}]",
        )(fn)
    return fn


@click.command("telemetry-gateway")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML (or .toml) file of settings; flags override it.",
)
@click.option("--cert", type=click.Path(path_type=Path), help="PEM server certificate.")
@click.option("--key", type=click.Path(path_type=Path), help="PEM server private key.")
@click.option(
    "--client-ca", type=click.Path(path_type=Path), help="PEM CA that agent certificates chain to."
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Embedded backbone and roster directory [default: {DEFAULT_DATA_DIR}].",
)
@click.option("--backbone", help="sqlite (embedded, the default) or nats://HOST:PORT.")
@click.option(
    "--metrics-bind", help="host:port for /metrics, /healthz and /readyz [default: not served]."
)
@_setting_options
def gateway_command(config_file: Path | None, **flags: Any) -> None:
    """Run the telemetry admission gateway (POST /v1/events, /v1/inventory over mTLS)."""
    try:
        file_values = read_config_file(config_file) if config_file else {}
        config = build_config(file_values, flags)
    except ValidationError as exc:
        raise _usage_error(exc) from None
    except GridError as exc:
        raise click.UsageError(str(exc)) from exc
    logs.configure("info")

    def ready(line: str) -> None:
        click.echo(line)
        sys.stdout.flush()

    try:
        asyncio.run(serve(config, ready))
    except (GridError, OSError, ssl.SSLError) as exc:
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)


def _store_options(fn: F) -> F:
    fn = click.option(
        "--backbone",
        default=None,
        help="sqlite (embedded, the default) or nats://HOST:PORT.",
    )(fn)
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help=f"Embedded backbone and roster directory [default: {DEFAULT_DATA_DIR}].",
    )(fn)


def _store(ctx: click.Context, data_dir: Path | None, backbone: str | None) -> tuple[str, Path]:
    parent = ctx.find_object(dict) or {}
    spec = backbone or parent.get("backbone") or "sqlite"
    return spec, data_dir or parent.get("data_dir") or DEFAULT_DATA_DIR


def _fail(exc: Exception) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(1)


@click.group("telemetry")
def telemetry_group() -> None:
    """Telemetry admission: roster, audit of published records, and the client."""


@telemetry_group.group("roster")
@_store_options
@click.pass_context
def roster_group(ctx: click.Context, data_dir: Path | None, backbone: str | None) -> None:
    """The append-only roster of agents; a running gateway picks changes up within 1 s."""
    ctx.obj = {"data_dir": data_dir, "backbone": backbone}


async def _append(
    spec: str, data_dir: Path, agent_id: str, state: RosterState, tenant: str | None
) -> dict[str, Any]:
    log: RosterLog = await open_roster(spec, data_dir)
    try:
        roster = Roster()
        roster.replay(await log.replay())
        target, tenant_id = roster.plan(agent_id, state, tenant)
        entry = await log.append(agent_id, target, tenant_id)
    finally:
        await log.close()
    return {
        "agent_id": entry.agent_id,
        "tenant_id": entry.tenant_id,
        "state": entry.state,
        "revision": entry.revision,
    }


def _roster_change(state: RosterState, agent_id: str, tenant: str | None, **store: Any) -> None:
    spec, data_dir = _store(click.get_current_context(), store["data_dir"], store["backbone"])
    try:
        click.echo(json.dumps(asyncio.run(_append(spec, data_dir, agent_id, state, tenant))))
    except GridError as exc:
        _fail(exc)


@roster_group.command("add")
@click.argument("agent_id")
@click.option("--tenant", required=True, help="Tenant the agent's records are stamped with.")
@_store_options
def roster_add(agent_id: str, tenant: str, **store: Any) -> None:
    """Register AGENT_ID (its certificate identity) for a tenant; not yet admitted."""
    _roster_change("registered", agent_id, tenant, **store)


def _state_command(name: str, state: RosterState, summary: str) -> None:
    @roster_group.command(name, help=summary)
    @click.argument("agent_id")
    @_store_options
    def command(agent_id: str, **store: Any) -> None:
        _roster_change(state, agent_id, None, **store)


_state_command("admit", "admitted", "Admit a registered or suspended agent.")
_state_command("suspend", "suspended", "Suspend an agent; its requests get agent_not_admitted.")
_state_command("revoke", "revoked", "Revoke an agent for good.")


async def _list(spec: str, data_dir: Path) -> Roster:
    log = await open_roster(spec, data_dir)
    try:
        roster = Roster()
        roster.replay(await log.replay())
        return roster
    finally:
        await log.close()


@roster_group.command("list")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@_store_options
def roster_list(output: str, **store: Any) -> None:
    """Every agent with its tenant, state and revision."""
    spec, data_dir = _store(click.get_current_context(), store["data_dir"], store["backbone"])
    try:
        agents = asyncio.run(_list(spec, data_dir)).agents()
    except GridError as exc:
        _fail(exc)
        return
    if output == "json":
        for a in agents:
            click.echo(json.dumps(a.__dict__))
        return
    click.echo(f"{'AGENT':40} {'TENANT':20} {'STATE':10} REVISION")
    for a in agents:
        click.echo(f"{a.agent_id:40} {a.tenant_id:20} {a.state:10} {a.revision}")


async def _print_records(spec: str, data_dir: Path) -> int:
    backbone = await open_backbone(spec, data_dir)
    count = 0
    try:
        async for batch_id, route, record in backbone.records():
            sys.stdout.write(json.dumps(record_json(batch_id, route, record)) + "\n")
            count += 1
    finally:
        await backbone.close()
    sys.stdout.flush()
    return count


@telemetry_group.command("records")
@click.option("-o", "--output", type=click.Choice(["json"]), default="json")
@_store_options
def records_command(output: str, data_dir: Path | None, backbone: str | None) -> None:
    """Print every durably published record, one JSON object per line."""
    spec, directory = _store(click.get_current_context(), data_dir, backbone)
    if spec == "sqlite" and not (directory / BACKBONE_FILE).exists():
        _fail(GridError(f"no embedded backbone in {directory}"))
    try:
        asyncio.run(_print_records(spec, directory))
    except (GridError, BackboneUnavailable) as exc:
        _fail(exc)


def register(main: click.Group) -> None:
    """Add ``telemetry-gateway`` and the ``telemetry`` group to the CLI."""
    main.add_command(gateway_command)
    main.add_command(telemetry_group)
