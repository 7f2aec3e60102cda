"""The live view's routes on a real loopback listener: page, snapshot, event stream, limits."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request
from prometheus_client import CollectorRegistry

from grid.adapters.health_server import HealthServer
from grid.adapters.live_view import (
    ChangeSignal,
    LiveViewRoutes,
    LiveViewSettings,
    is_loopback,
)
from grid.core.crdt.replica import GridState
from grid.core.live.feed import EVENT_TYPES
from grid.core.live.view import empty_view
from grid.operator.live import OperatorLiveView
from grid.testing.poll import eventually

AT = "2026-01-01T00:00:00.000Z"


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


class Served:
    """A HealthServer with the live view over a mutable view."""

    def __init__(self, settings: LiveViewSettings) -> None:
        self.view: dict[str, Any] = empty_view(AT)
        self.changes = ChangeSignal()
        self.routes = LiveViewRoutes(lambda: self.view, self.changes, settings)
        self.server = HealthServer(CollectorRegistry())
        self.server.mounts.append(self.routes.add_to)
        self.base = ""

    async def __aenter__(self) -> Served:
        host, port = await self.server.start("127.0.0.1", 0)
        self.base = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.server.stop()


async def _events(resp: aiohttp.ClientResponse, count: int) -> list[dict[str, Any]]:
    out = []
    while len(out) < count:
        line = (await resp.content.readline()).decode()
        if line.startswith("data: "):
            out.append(json.loads(line[6:]))
    return out


async def test_page_is_self_contained_and_snapshot_is_the_view(
    http: aiohttp.ClientSession,
) -> None:
    async with Served(LiveViewSettings()) as s:
        async with http.get(f"{s.base}/ui/") as resp:
            assert resp.status == 200
            assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
            page = await resp.text()
        # Everything the page loads is relative to /ui/: no CDN, no other origin.
        for ref in re.findall(r'(?:src|href)="([^"]+)"', page):
            assert ref in {"live.js", "live.css", "data:,"}, ref
        for asset in ("live.js", "live.css"):
            async with http.get(f"{s.base}/ui/{asset}") as resp:
                assert resp.status == 200
                assert "http://" not in await resp.text() or asset == "live.js"
        async with http.get(f"{s.base}/ui", allow_redirects=False) as resp:
            assert resp.status == 302 and resp.headers["Location"] == "/ui/"
        s.view["sites"] = ["east"]
        async with http.get(f"{s.base}/ui/state.json") as resp:
            assert await resp.json() == s.view
        async with http.post(f"{s.base}/ui/state.json") as resp:
            assert resp.status == 405  # read-only


async def test_stream_sends_all_sections_then_coalesced_changes(
    http: aiohttp.ClientSession,
) -> None:
    async with (
        Served(LiveViewSettings(interval_s=0.25)) as s,
        http.get(f"{s.base}/ui/events") as resp,
    ):
        assert resp.headers["Content-Type"] == "text/event-stream"
        first = await _events(resp, len(EVENT_TYPES))
        assert [e["type"] for e in first] == list(EVENT_TYPES)
        loop = asyncio.get_running_loop()
        started = loop.time()
        # Two changes in quick succession arrive as one event holding the last.
        s.view = {**s.view, "lanes": [{"origin": "a", "lane": "state", "revisions": {}}]}
        s.changes.notify()
        s.view = {**s.view, "lanes": [{"origin": "b", "lane": "state", "revisions": {}}]}
        s.changes.notify()
        (event,) = await _events(resp, 1)
        assert event["type"] == "lanes" and event["lanes"][0]["origin"] == "b"
        s.view = {**s.view, "generated_at": "later", "traffic": {"east": {"x": 1}}}
        s.changes.notify()
        (event,) = await _events(resp, 1)
        assert event["type"] == "traffic" and event["generated_at"] == "later"
        assert loop.time() - started >= 0.25  # at most one batch per interval


async def test_streams_beyond_the_cap_are_refused(http: aiohttp.ClientSession) -> None:
    async with Served(LiveViewSettings(streams_max=1)) as s:
        async with http.get(f"{s.base}/ui/events") as first:
            await _events(first, 1)
            async with http.get(f"{s.base}/ui/events") as second:
                assert second.status == 503
            async with http.get(f"{s.base}/healthz") as probe:
                assert probe.status == 200
        await eventually(lambda: s.routes.streams == 0, "the closed stream's slot freed")
        async with http.get(f"{s.base}/ui/events") as again:
            assert again.status == 200


@pytest.mark.parametrize(
    ("bind", "public", "everyone"),
    [
        ("127.0.0.1:9090", False, True),
        ("[::1]:9090", False, True),
        ("localhost:9090", False, True),
        ("0.0.0.0:9090", False, False),
        ("10.1.2.3:9090", False, False),
        ("0.0.0.0:9090", True, True),
    ],
)
def test_view_follows_the_metrics_bind(bind: str, public: bool, everyone: bool) -> None:
    health = HealthServer(CollectorRegistry())
    routes = OperatorLiveView("east", GridState("east"), lambda: None).mount(health, bind, public)
    assert health.mounts == [routes.add_to]
    assert routes.loopback_only is not everyone
    outsider = make_mocked_request("GET", "/ui/state.json", transport=_peer("10.0.0.9"))
    local = make_mocked_request("GET", "/ui/state.json", transport=_peer("127.0.0.1"))
    metrics = make_mocked_request("GET", "/metrics", transport=_peer("10.0.0.9"))
    assert routes.allowed(outsider) is everyone
    assert routes.allowed(local) and routes.allowed(metrics)


def _peer(host: str) -> Any:
    class Transport:
        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return (host, 40000) if name == "peername" else default

        def is_closing(self) -> bool:
            return False

    return Transport()


async def test_loopback_clients_pass_a_loopback_only_view(http: aiohttp.ClientSession) -> None:
    """Through a real listener (the refusal of other peers is the mocked case above)."""
    async with Served(LiveViewSettings()) as s:
        s.routes.loopback_only = True
        async with http.get(f"{s.base}/ui/state.json") as resp:
            assert resp.status == 200  # the test client is on loopback


def test_loopback_hosts() -> None:
    assert is_loopback("127.0.0.5") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("example")
