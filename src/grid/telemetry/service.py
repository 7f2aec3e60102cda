"""Run the telemetry gateway as a process: open, replay, listen, announce, stop.

The process prints exactly one line on stdout once the listener is open (after
the full roster replay): ``{"listening": "HOST:PORT", "gateway_id": ...,
"backbone": ...}`` (plus ``"metrics": "HOST:PORT"`` when ``metrics_bind`` serves
``/metrics``), so supervisors and tests know when to connect. SIGTERM or
SIGINT stops it cleanly: the listener closes, in-flight requests finish
(bounded), the roster tail stops and the backbone is closed; the exit code is 0.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

from grid.adapters.backbone import Backbone, RosterLog
from grid.adapters.health_server import HealthServer
from grid.adapters.stop_signals import stop_event
from grid.core.address import format_address, parse_address
from grid.telemetry.backbones import open_backbone, open_roster
from grid.telemetry.config import GatewayConfig
from grid.telemetry.server import TelemetryGateway, server_ssl_context


def readiness_line(
    gateway: TelemetryGateway, backbone_spec: str, metrics: str | None = None
) -> str:
    """The single JSON line announcing that the listener is open (and /metrics, if served)."""
    line = {
        "listening": gateway.address,
        "gateway_id": gateway.gateway_id,
        "backbone": backbone_spec,
    }
    if metrics is not None:
        line["metrics"] = metrics
    return json.dumps(line)


async def serve(
    config: GatewayConfig,
    ready: Callable[[str], Any],
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is None)."""
    ssl_context = server_ssl_context(str(config.cert), str(config.key), str(config.client_ca))
    gateway_id = config.settings.gateway_id or socket.gethostname()
    stop = stop if stop is not None else stop_event()
    backbone: Backbone | None = None
    roster_log: RosterLog | None = None
    gateway: TelemetryGateway | None = None
    health: HealthServer | None = None
    try:
        backbone = await open_backbone(config.backbone, config.data_dir)
        roster_log = await open_roster(config.backbone, config.data_dir)
        gateway = TelemetryGateway(config.settings, backbone, roster_log, ssl_context, gateway_id)
        await gateway.start()
        metrics = None
        if config.metrics_bind is not None:
            health = HealthServer(gateway.registry)
            metrics = format_address(*await health.start(*parse_address(config.metrics_bind)))
        ready(readiness_line(gateway, config.backbone, metrics))
        await stop.wait()
    finally:
        if health is not None:
            await health.stop()
        if gateway is not None:
            await gateway.stop()
        if roster_log is not None:
            await roster_log.close()
        if backbone is not None:
            await backbone.close()
