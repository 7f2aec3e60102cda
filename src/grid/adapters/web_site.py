"""Serving an aiohttp application on a plain TCP listener, for the small HTTP endpoints.

The operator's metrics/health endpoint and the demo's mock provider both serve
one aiohttp application on ``host:port``; this is the one place that starts
such a listener, reports the address it bound, and cleans up after a failed
bind so no runner is left behind.
"""

from __future__ import annotations

from aiohttp import web


async def start_site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, str, int]:
    """Serve ``app`` on ``host:port`` (port 0 picks a free one).

    Returns the runner (``cleanup()`` stops serving) and the bound host and port.
    A bind failure (``OSError``) cleans the runner up before it propagates.
    """
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError:
        await runner.cleanup()
        raise
    bound = runner.addresses[0]
    return runner, str(bound[0]), int(bound[1])
