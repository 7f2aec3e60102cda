"""Pooled HTTP client sessions for the operator's probes of one target each.

A provider's health checks and scrapes reach the same endpoint every few
seconds. `probe_session` opens the aiohttp session one target's probes share:
its connector keeps the connection between probes for `PROBE_KEEPALIVE_S`, so a
probe costs a request, not a TCP connect and a TLS handshake. That is longer
than the default intervals (10 s health, 15 s scrape, each up to 10 % later by
jitter), where aiohttp's 15 s default let about every other scrape reconnect,
and shorter than the idle timeout of Grid's own listeners
(`grid.adapters.http_listener.ListenerPolicy`, 30 s), so a kept connection is
not closed by the server just as a probe is sent on it. A server that closes
sooner (uvicorn's 5 s) costs a reconnect: aiohttp drops a connection the peer
closed, and retries a GET once when a kept one fails on first use.

The session carries no default headers and no credentials: anything a probe
authenticates with is passed with its own request. Its owner closes it when the
target goes (a deleted provider's connection is closed at once, not left to
expire) and at shutdown.
"""

from __future__ import annotations

import aiohttp

from grid.adapters.http_listener import ListenerPolicy
from grid.adapters.tracing import client_trace_configs

PROBE_KEEPALIVE_S = ListenerPolicy().idle_timeout_s - 5.0
"""Seconds an idle connection to a probed target is kept for the next probe: 5 s under
Grid's listener idle timeout. Longer than every default probe interval with its jitter."""

PROBE_CONNECTIONS_MAX = 4
"""Most connections one target's session holds: its health check and its scrape may run
at once, and a slow one must not hold up the other."""


def probe_session(keepalive_s: float = PROBE_KEEPALIVE_S) -> aiohttp.ClientSession:
    """A session for one target's probes, traced (with traceparent) when tracing is on."""
    connector = aiohttp.TCPConnector(limit=PROBE_CONNECTIONS_MAX, keepalive_timeout=keepalive_s)
    return aiohttp.ClientSession(connector=connector, trace_configs=client_trace_configs())
