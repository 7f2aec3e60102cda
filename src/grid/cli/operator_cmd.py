"""``grid operator``: run one site operator against a resource store.

One flag per `OperatorSettings` field, generated from it with its description
as help; every flag has a ``GRID_*`` environment fallback (for example
``--site`` and ``GRID_SITE``), then upstream Grid's name where it has one
(``GRID_SWIM_SITE_NAME``). docs/operator.md lists them with their defaults. The
one environment-only setting, upstream's hex ``GRID_SWIM_ENCRYPT_KEY``, is read
here and never echoed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import NoneType
from typing import TYPE_CHECKING, Any, TypeVar, get_args

import click
import pydantic
from pydantic import FilePath
from pydantic.fields import FieldInfo

from grid.adapters.store.url import open_store
from grid.adapters.tracing import SERVICE_OPERATOR, start_tracing
from grid.errors import GridError
from grid.operator import logs
from grid.operator.runtime import Operator
from grid.operator.settings import OperatorSettings, env_names, env_only, flag_name

if TYPE_CHECKING:
    from grid.operator.leader import ElectedOperator

log = logging.getLogger("grid.operator")

F = TypeVar("F", bound=Callable[..., Any])


def _click_type(field: FieldInfo) -> click.ParamType[Any]:
    """The click type of a setting, from its annotation and bounds."""
    kind = next(a for a in get_args(field.annotation) or (field.annotation,) if a is not NoneType)
    if kind == FilePath:
        return click.Path(path_type=Path, dir_okay=False, exists=True)
    if kind is Path:
        return click.Path(path_type=Path, file_okay=False)
    bounds = [getattr(m, "ge", None) for m in field.metadata]
    if kind is int:
        int_floors = [int(b) for b in bounds if isinstance(b, int)]
        return click.IntRange(min=int_floors[0]) if int_floors else click.INT
    if kind is float:
        floors = [float(b) for b in bounds if isinstance(b, int | float)]
        return click.FloatRange(min=floors[0]) if floors else click.FLOAT
    return click.STRING


def _setting_options(fn: F) -> F:
    """Add one ``--flag`` per `OperatorSettings` field, with its GRID_* fallback and help."""
    for name, field in reversed(list(OperatorSettings.model_fields.items())):
        if env_only(name):
            continue
        required = field.is_required()
        if field.annotation is bool:  # an on/off switch: --flag / --no-flag
            flag = flag_name(name)
            fn = click.option(
                f"{flag}/--no-{flag.removeprefix('--')}",
                name,
                envvar=env_names(name),
                show_envvar=True,
                default=field.default,
                show_default=True,
                help=field.description,
            )(fn)
            continue
        if field.annotation == list[str]:  # repeatable: --flag A --flag B
            fn = click.option(
                flag_name(name),
                name,
                envvar=env_names(name),
                show_envvar=True,
                multiple=True,
                help=field.description,
            )(fn)
            continue
        # A required option is given no default at all: an explicit ``default=None``
        # would count as a value, and the missing flag would reach pydantic unnamed.
        default: dict[str, Any] = {} if required else {"default": field.default}
        fn = click.option(
            flag_name(name),
            name,
            envvar=env_names(name),
            show_envvar=True,
            type=_click_type(field),
            required=required,
            show_default=field.default is not None,
            help=field.description,
            **default,
        )(fn)
    return fn


async def _serve(settings: OperatorSettings) -> None:
    tracing = start_tracing(
        SERVICE_OPERATOR, settings.otlp_endpoint, attributes={"grid.site": settings.site}
    )
    try:
        await _run(settings)
    finally:
        if tracing is not None:
            tracing.shutdown()


async def _run(settings: OperatorSettings) -> None:
    store = await open_store(settings.store, kubeconfig=settings.kubeconfig)
    operator: Operator | ElectedOperator
    if settings.leader_election:
        # Imported here: the Kubernetes client costs about half a second to import, which
        # every other grid command (and an operator on the embedded store) should not pay.
        from grid.adapters.store.kubernetes import KubernetesStore
        from grid.operator.leader import ElectedOperator

        if not isinstance(store, KubernetesStore):
            await store.close()
            raise GridError("--leader-election needs --store kubernetes", code="invalid")
        operator = ElectedOperator(settings, store)
    else:
        operator = await Operator.prepared(settings, store)
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
@_setting_options
@click.option(
    "--log-level",
    envvar="GRID_LOG_LEVEL",
    show_envvar=True,
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="Least severe log records written (JSON lines on stderr).",
)
def operator_cmd(log_level: str, **options: Any) -> None:
    """Run one site operator: SWIM, controllers, scraping and the overlay renderer."""
    logs.configure(log_level)
    options.update(_environment_only())
    try:
        settings = OperatorSettings.model_validate(options)
    except pydantic.ValidationError as exc:
        raise _usage_error(exc) from None
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


def _usage_error(exc: pydantic.ValidationError) -> click.UsageError:
    """The first refused setting as a usage line naming its flag, never a validation dump."""
    error = exc.errors(include_url=False, include_input=False)[0]
    message = str(error["msg"]).removeprefix("Value error, ")
    field = str(error["loc"][0]) if error["loc"] else ""
    if field not in OperatorSettings.model_fields:
        return click.UsageError(message)
    hint = " / ".join(env_names(field)) if env_only(field) else flag_name(field)
    return click.BadParameter(message, param_hint=f"'{hint}'")


def _environment_only() -> dict[str, Any]:
    """The settings read from the environment only: the hex SWIM key (upstream's form).

    A malformed value is a usage error that names the variable, never the value.
    """
    found: dict[str, Any] = {}
    for name in OperatorSettings.model_fields:
        if not env_only(name):
            continue
        variable = next((v for v in env_names(name) if os.environ.get(v)), None)
        if variable is None:
            continue
        try:
            raw = bytes.fromhex(os.environ[variable].strip())
        except ValueError:
            raw = b""
        if len(raw) != 32:
            raise click.UsageError(f"{variable} must be 64 hexadecimal digits (a 32-byte key)")
        found[name] = raw
    return found


def register(main: click.Group) -> None:
    """Add ``grid operator`` to the CLI."""
    main.add_command(operator_cmd)
