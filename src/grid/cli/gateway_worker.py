"""One worker process of ``grid gateway --workers N``, started by its supervisor.

The supervisor (`grid.gateway.workers.Supervisor`) runs ``python -m
grid.cli.gateway_worker FD``, writes the pickled `WorkerSpec` to its stdin and
keeps the other end of the socket ``FD``. The worker builds its `Gateway`,
answers ``serving ADMIN`` on the socket once it listens, and drains on SIGTERM
or when the supervisor's end closes. It exits 2 when its gateway cannot be
prepared and 1 when it cannot listen, as the single-process command does.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import sys

from grid.adapters.tracing import GATEWAY_SAMPLE_RATIO, SERVICE_GATEWAY, start_tracing
from grid.gateway.config import ConfigError, load_config
from grid.gateway.server import Gateway
from grid.gateway.snapshot import OverlayRejected
from grid.gateway.workers import WorkerSpec, serve_worker, worker_config
from grid.operator.logs import configure as configure_logs


def main() -> None:
    """Run the worker the supervisor describes on stdin."""
    channel = socket.socket(fileno=int(sys.argv[-1]))
    spec = pickle.loads(sys.stdin.buffer.read())  # written by our own supervisor
    assert isinstance(spec, WorkerSpec)
    configure_logs("info")
    tracing = start_tracing(SERVICE_GATEWAY, spec.otlp_endpoint, sample_ratio=GATEWAY_SAMPLE_RATIO)
    try:
        try:
            config = worker_config(
                load_config(spec.config_path, spec.settings.config_max_bytes), spec
            )
            gateway = Gateway(
                config, spec.settings, spec.config_path, spec.operator, spec.credentials
            )
        except (ConfigError, OverlayRejected, OSError, ValueError) as exc:
            print(
                f"error: gateway worker {spec.index}: {type(exc).__name__}: {exc}", file=sys.stderr
            )
            sys.exit(2)
        try:
            asyncio.run(serve_worker(gateway, channel))
        except OSError as exc:
            print(
                f"error: gateway worker {spec.index} cannot listen: {exc.strerror}", file=sys.stderr
            )
            sys.exit(1)
    finally:
        if tracing is not None:
            tracing.shutdown()


if __name__ == "__main__":
    main()
