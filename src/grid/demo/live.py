"""The demo's aggregated live view: every site's ``/ui/state.json`` merged into one page.

``grid demo`` serves it on its own loopback listener, under the metrics
listener's policy, and writes its URL to demo.json as ``ui`` (SPEC-DECISIONS
§9, §13). A poll loop reads each site's view every `POLL_INTERVAL_S`, merges
them with `grid.core.live.view.merge_views` (a site that does not answer is
listed as unreachable, while the others' columns show how they see it) and adds
the requests each cluster's mock provider received through the gateways. It
wakes the page's event stream only when the merged view changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
from aiohttp import web

from grid.adapters.health_server import METRICS_POLICY
from grid.adapters.http_listener import HttpListener
from grid.adapters.live_view import ChangeSignal, LiveViewRoutes
from grid.core.live.view import View, empty_view, merge_views
from grid.core.overlay import format_timestamp

POLL_INTERVAL_S = 0.5
"""Seconds between reads of every site's view. Shorter shows changes sooner, at
one request per site per poll."""
STATE_BYTES_MAX = 4 * 1024 * 1024
"""Largest site view read; a bigger answer counts as the site not answering."""
TRAFFIC_KEY = "@providers"
"""The traffic section's key for the demo's counts (requests each mock provider received);
not a site name (a site name cannot hold "@"), so it never shadows one."""

Counts = Callable[[aiohttp.ClientSession], Awaitable[dict[str, int]]]


def _now() -> str:
    return format_timestamp(dt.datetime.now(dt.UTC))


def _comparable(view: View) -> View:
    return {k: v for k, v in view.items() if k != "generated_at"}


async def read_view(session: aiohttp.ClientSession, address: str) -> View | None:
    """One site's view, or None when it does not answer in time or answers badly."""
    url = f"http://{address}/ui/state.json"
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=1)) as response:
            if response.status != 200:
                return None
            body = await response.content.read(STATE_BYTES_MAX + 1)
            if len(body) > STATE_BYTES_MAX:
                return None
            view = json.loads(body)
            return view if isinstance(view, dict) else None
    return None


class DemoLiveView:
    """Polls each site's view and serves the merge."""

    def __init__(self, sites: Mapping[str, str], counts: Counts | None = None) -> None:
        self.sites = dict(sites)
        """Site name → its metrics listener's ``host:port``."""
        self._counts = counts
        self.changes = ChangeSignal()
        self.current: View = empty_view(_now(), self.sites)
        self._listener: HttpListener | None = None
        self._poller: asyncio.Task[None] | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on host:port (0 picks a free port) and start polling; returns the URL."""
        app = web.Application()
        LiveViewRoutes(lambda: self.current, self.changes).add_to(app)
        self._listener = HttpListener(app, METRICS_POLICY)
        bound_host, bound_port = await self._listener.start(host, port)
        self._poller = asyncio.create_task(self._poll(), name="demo-live-view")
        return f"http://{bound_host}:{bound_port}/ui/"

    async def poll_once(self, session: aiohttp.ClientSession) -> None:
        """Read every site, merge, and wake the streams if anything changed."""
        names = sorted(self.sites)
        views = await asyncio.gather(*(read_view(session, self.sites[n]) for n in names))
        answered = [v for v in views if v is not None]
        missing = [n for n, v in zip(names, views, strict=True) if v is None]
        merged = merge_views(answered, _now(), missing)
        if self._counts is not None:
            merged["traffic"][TRAFFIC_KEY] = dict(sorted((await self._counts(session)).items()))
        if _comparable(merged) != _comparable(self.current):
            self.current = merged
            self.changes.notify()

    async def _poll(self) -> None:
        async with aiohttp.ClientSession() as session:
            while True:
                await self.poll_once(session)
                await asyncio.sleep(POLL_INTERVAL_S)

    async def stop(self) -> None:
        """Stop polling and serving."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        if self._listener is not None:
            await self._listener.stop()


def site_addresses(description: Mapping[str, Any]) -> dict[str, str]:
    """Each site's metrics ``host:port`` from a demo.json document."""
    return {name: site["metrics"] for name, site in description["sites"].items()}
