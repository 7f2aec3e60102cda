"""The live view's HTTP routes: ``/ui/``, ``/ui/state.json`` and ``/ui/events`` (§13).

`LiveViewRoutes` serves a view that its owner assembles (`grid.core.live.view`)
on an existing aiohttp application: the operator mounts it on its metrics
listener, ``grid demo`` on its own loopback listener for the aggregate. It is
read-only (GET only) and serves under the listener's policy like every other
route. The page and its script and style ship in the package
(``grid/adapters/live_assets``); the page loads nothing from elsewhere, and a
Content-Security-Policy says so to the browser.

``/ui/events`` is a Server-Sent Events stream: on connect, one event per
section; afterwards, when the owner signals a change, one event per section
that changed, at most every `EVENT_INTERVAL_S` (changes in between coalesce).
A comment line every `KEEPALIVE_S` keeps idle proxies from closing it. At most
``streams_max`` streams are open at once, so viewers cannot take every slot of
the listener from scrapers and probes; one more is answered 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import web

from grid.core.live.feed import EVENT_INTERVAL_S, changed_events
from grid.core.live.view import View

ViewSource = Callable[[], View | Awaitable[View]]

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "live.js": "text/javascript; charset=utf-8",
    "live.css": "text/css; charset=utf-8",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

DISCONNECT_CHECK_S = 0.5
"""Seconds between checks, on an idle stream, whether its viewer went away (aiohttp
does not cancel a handler when its client leaves)."""


@dataclass(frozen=True)
class LiveViewSettings:
    """Limits of the live view's routes."""

    streams_max: int = 16
    """Open ``/ui/events`` streams at once; one more is answered 503. Each holds one
    connection of the listener for as long as a page is open, so this stays well
    below the listener's connection cap."""
    keepalive_s: float = 15.0
    """Seconds between comment lines on an idle stream. Shorter survives stricter
    idle proxies; each line is a few bytes per viewer."""
    interval_s: float = EVENT_INTERVAL_S
    """Least seconds between two batches of events on one stream (§13: 0.25)."""


def is_loopback(host: str) -> bool:
    """Whether a bind host serves this machine only (``localhost`` or a loopback IP)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ChangeSignal:
    """Wakes every waiting stream when the view may have changed."""

    def __init__(self) -> None:
        self.version = 0
        self._event = asyncio.Event()

    def notify(self) -> None:
        """Something the view shows changed."""
        self.version += 1
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, seen: int, timeout_s: float) -> bool:
        """Wait until the version passes ``seen``; False when ``timeout_s`` ran out."""
        if self.version != seen:
            return True
        event = self._event
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await event.wait()
                return True
        return False


def _asset(name: str) -> bytes:
    return resources.files("grid.adapters").joinpath("live_assets", name).read_bytes()


class LiveViewRoutes:
    """The three routes over one view source."""

    def __init__(
        self,
        source: ViewSource,
        changes: ChangeSignal,
        settings: LiveViewSettings | None = None,
        *,
        loopback_only: bool = False,
    ) -> None:
        self._source = source
        self.loopback_only = loopback_only
        """Answer only clients on this machine (``kubectl port-forward`` arrives over
        the pod's loopback); anyone else gets 404, as if there were no view."""
        self.changes = changes
        self.settings = settings or LiveViewSettings()
        self.streams = 0
        self.closing = False
        self._assets = {name: _asset(name) for name in ASSETS}

    def add_to(self, app: web.Application) -> None:
        """Mount ``/ui/`` and its assets, ``/ui/state.json`` and ``/ui/events``."""
        app.middlewares.append(self._only_allowed)
        app.router.add_get("/ui", self._redirect)
        app.router.add_get("/ui/", self._page)
        app.router.add_get("/ui/live.js", self._page)
        app.router.add_get("/ui/live.css", self._page)
        app.router.add_get("/ui/state.json", self._state)
        app.router.add_get("/ui/events", self._events)
        app.on_shutdown.append(self._close_streams)

    def allowed(self, request: web.BaseRequest) -> bool:
        """Whether this client may see the view."""
        if not self.loopback_only or not request.path.startswith("/ui"):
            return True
        return request.remote is not None and is_loopback(request.remote)

    @web.middleware
    async def _only_allowed(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not self.allowed(request):
            raise web.HTTPNotFound()
        response: web.StreamResponse = await handler(request)
        return response

    async def _close_streams(self, _app: web.Application) -> None:
        """At shutdown, end every open stream at once instead of waiting for its viewer."""
        self.closing = True
        self.changes.notify()

    async def view(self) -> View:
        """The current view."""
        outcome = self._source()
        if isinstance(outcome, dict):
            return outcome
        return await outcome

    async def _redirect(self, _request: web.Request) -> web.Response:
        raise web.HTTPFound("/ui/")

    async def _page(self, request: web.Request) -> web.Response:
        name = request.path.removeprefix("/ui/") or "index.html"
        return web.Response(
            body=self._assets[name],
            headers={"Content-Type": ASSETS[name], **SECURITY_HEADERS},
        )

    async def _state(self, _request: web.Request) -> web.Response:
        body = json.dumps(await self.view(), separators=(",", ":")).encode()
        return web.Response(
            body=body,
            headers={"Content-Type": "application/json", **SECURITY_HEADERS},
        )

    async def _events(self, request: web.Request) -> web.StreamResponse:
        if self.streams >= self.settings.streams_max:
            return web.Response(status=503, text="too many live view streams\n")
        self.streams += 1
        try:
            return await self._stream(request)
        finally:
            self.streams -= 1

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", **SECURITY_HEADERS}
        )
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        previous: View | None = None
        s = self.settings
        with contextlib.suppress(ConnectionError):
            while not self.closing:
                seen = self.changes.version
                current = await self.view()
                await _send(response, changed_events(previous, current))
                previous = current
                sent_at = quiet_since = loop.time()
                while not await self.changes.wait(seen, DISCONNECT_CHECK_S):
                    if self.closing:
                        return response
                    if request.transport is None or request.transport.is_closing():
                        return response  # the viewer left: free its slot now
                    if loop.time() - quiet_since >= s.keepalive_s:
                        await response.write(b": keepalive\n\n")
                        quiet_since = loop.time()
                # Coalesce: whatever changes before the interval is over goes in one batch.
                await asyncio.sleep(max(0.0, sent_at + s.interval_s - loop.time()))
        return response


async def _send(response: web.StreamResponse, events: list[dict[str, Any]]) -> None:
    for event in events:
        data = json.dumps(event, separators=(",", ":"))
        await response.write(f"data: {data}\n\n".encode())
