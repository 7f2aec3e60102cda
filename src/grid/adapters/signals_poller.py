"""The signals poller: ``GET /v1/site/signals`` from each peer over keep-alive mTLS.

Under ``signalTransport.mode: poll`` a site pulls every alive peer's own
signals (seed 000). `SignalsPoller` holds one aiohttp client session whose
connector keeps one connection per peer alive between polls, so a poll costs a
request, not a handshake. Each poll sends the peer's last ``ETag`` in
``If-None-Match``; a ``304`` keeps the document already held.

What comes back is untrusted: `grid.adapters.signals_client.SignalsClient`
(the gateway's client too) reads the body against a size bound, decodes and
validates it, and it is kept only when it names the peer polled as its ``site``.
The server must present a certificate the declared trust accepts as a peer; its
host name is not checked, because a peer is known by its SWIM-advertised
address, and the certificate pin or SPIFFE ID is what identifies it. A peer that
stops answering keeps its last document; eviction by age is the merge's job
(`grid.core.routing.signals.merge_pulled`).

Metric: ``grid_signals_polls_total{outcome}`` with outcome ``ok``,
``not_modified`` or ``error``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from grid.adapters.health_server import ClosedCounter
from grid.adapters.signals_client import (
    POLL_ERRORS,
    PollFailed,
    PollOutcome,
    Pulled,
    SignalsClient,
)
from grid.core.routing.signals import SignalsDocument
from grid.core.trust import PeerClass, TrustPolicy
from grid.errors import GridError

__all__ = ["PollOutcome", "Pulled", "SignalsPoller"]

log = logging.getLogger(__name__)

POLL_TIMEOUT_S = 2.0
"""Seconds one poll may take, connect and handshake included. Longer tolerates slow
peers; a stalled peer holds its poll that long each round."""

BODY_BYTES_MAX = 4 * 1024 * 1024
"""Largest signals document accepted, in bytes. A site with many providers needs more;
every poll may buffer this much."""

KEEPALIVE_S = 30.0
"""Seconds an idle connection to a peer is kept for the next poll. Must stay under the
server's idle timeout, or the next poll meets a closed connection."""


class UntrustedServer(aiohttp.ClientError, GridError):
    """The server's certificate is not an authorized peer's under the declared trust."""


class _TrustedConnector(aiohttp.TCPConnector):
    """A connector that checks each new connection's server certificate once, at connect.

    The check runs when a connection is made, not per response, because a kept-alive
    connection is already known, and aiohttp releases a connection before the
    caller sees a small response.
    """

    def __init__(self, trust: Callable[[], TrustPolicy], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._trust = trust

    async def _wrap_create_connection(
        self, *args: Any, **kwargs: Any
    ) -> tuple[asyncio.Transport, Any]:
        transport, protocol = await super()._wrap_create_connection(*args, **kwargs)
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der or self._trust().classify(der) is not PeerClass.PEER:
            transport.abort()
            raise UntrustedServer("untrusted_server")
        return transport, protocol


class SignalsPoller:
    """Polls peers' signals endpoints and keeps the last good document of each."""

    def __init__(
        self,
        ssl_context: ssl.SSLContext,
        trust: Callable[[], TrustPolicy],
        registry: CollectorRegistry,
        timeout_s: float = POLL_TIMEOUT_S,
        body_bytes_max: int = BODY_BYTES_MAX,
    ) -> None:
        ssl_context.check_hostname = False  # peers are identified by trust, not by name
        self.ssl_context = ssl_context

        def connector() -> aiohttp.BaseConnector:
            return _TrustedConnector(
                trust, ssl=ssl_context, limit_per_host=1, keepalive_timeout=KEEPALIVE_S
            )

        self._client = SignalsClient(connector, timeout_s, body_bytes_max)
        self.pulled: dict[str, Pulled] = {}
        self.polls = ClosedCounter(
            "grid_signals_polls_total",
            "Polls of peers' signals endpoints, by outcome.",
            "outcome",
            [o.value for o in PollOutcome],
            registry,
        )

    def documents(self) -> dict[str, SignalsDocument]:
        """The last good document of every peer polled, by peer site."""
        return {peer: p.document for peer, p in self.pulled.items()}

    async def poll(self, peer: str, address: str) -> PollOutcome:
        """Poll one peer at ``host:port``; never raises for what the peer does."""
        try:
            outcome = await self._poll(peer, address)
        except PollFailed as exc:
            log.debug("signals poll failed: %s", exc.reason, extra={"peer": peer})
            outcome = PollOutcome.ERROR
        except POLL_ERRORS as exc:
            reason = "untrusted_server" if isinstance(exc, UntrustedServer) else type(exc).__name__
            log.debug("signals poll failed: %s", reason, extra={"peer": peer})
            outcome = PollOutcome.ERROR
        self.polls.inc(outcome.value)
        return outcome

    async def _poll(self, peer: str, address: str) -> PollOutcome:
        url = f"https://{address}/v1/site/signals?scope=site"
        pulled = await self._client.fetch(url, self.pulled.get(peer))
        if pulled is None:
            return PollOutcome.NOT_MODIFIED
        if pulled.document.site != peer:
            raise PollFailed("wrong_site")
        self.pulled[peer] = pulled
        return PollOutcome.OK

    def forget(self, peer: str) -> None:
        """Drop a peer's document (it left the grid's trust)."""
        self.pulled.pop(peer, None)

    async def close(self) -> None:
        """Close the kept-alive connections."""
        await self._client.close()
