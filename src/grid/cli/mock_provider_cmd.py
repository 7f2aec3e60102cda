"""`grid mock-provider`: run one mock OpenAI-compatible backend with vLLM metrics.

See `grid.demo.mock_provider` for what each profile does. The command prints the
address it serves on (useful with ``--port 0``) and runs until interrupted.
"""

from __future__ import annotations

import asyncio

import click

from grid.adapters.stop_signals import stop_event
from grid.demo.mock_provider import PROFILES, MockProvider, MockSettings
from grid.operator import logs


async def _serve(settings: MockSettings, host: str, port: int) -> None:
    provider = MockProvider(settings)
    bound_host, bound_port = await provider.start(host, port)
    click.echo(
        f"mock-provider serving {settings.model} on http://{bound_host}:{bound_port} "
        f"(profile {settings.profile}, capacity {settings.capacity})",
    )
    stop = stop_event()
    try:
        await stop.wait()
    finally:
        await provider.stop()


@click.command("mock-provider")
@click.option("--port", type=click.IntRange(0, 65535), required=True, help="TCP port; 0 = any.")
@click.option("--model", required=True, help="The model name served and reported.")
@click.option(
    "--profile",
    type=click.Choice(PROFILES),
    default="steady",
    show_default=True,
    help="steady: real load only; bursty: plus a synthetic wave; failing: unhealthy.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--capacity",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Concurrency slots; further requests wait.",
)
@click.option(
    "--service-time-ms",
    type=click.FloatRange(min=0),
    default=50.0,
    show_default=True,
    help="Mean simulated service time per completion.",
)
@click.option(
    "--burst-period",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds per cycle of the bursty profile's wave.",
)
@click.option(
    "--degrade",
    default=None,
    metavar="F:T",
    help="Multiply service times by F from T seconds after the start (e.g. 3:30).",
)
def mock_provider(
    port: int,
    model: str,
    profile: str,
    host: str,
    capacity: int,
    service_time_ms: float,
    burst_period: float,
    degrade: str | None,
) -> None:
    """Serve an OpenAI-compatible mock backend with vLLM-named Prometheus metrics."""
    factor, after_s = _degrade(degrade)
    try:
        settings = MockSettings(
            model=model,
            profile=profile,
            capacity=capacity,
            service_time_s=service_time_ms / 1000.0,
            burst_period_s=burst_period,
            degrade_factor=factor,
            degrade_after_s=after_s,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--degrade") from exc
    logs.configure("info")
    try:
        asyncio.run(_serve(settings, host, port))
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from exc


def _degrade(text: str | None) -> tuple[float, float]:
    """``F:T`` as (factor, seconds); no degradation is (1, 0)."""
    if text is None:
        return 1.0, 0.0
    factor, sep, after = text.partition(":")
    try:
        if not sep:
            raise ValueError(text)
        return float(factor), float(after)
    except ValueError:
        raise click.BadParameter(
            f"expected F:T (factor:seconds), got {text!r}", param_hint="--degrade"
        ) from None


def register(main: click.Group) -> None:
    """Add `mock-provider` to the `grid` command group."""
    main.add_command(mock_provider)
