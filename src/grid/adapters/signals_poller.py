"""The signals poller: ``GET /v1/site/signals`` from each peer over keep-alive mTLS.

Under ``signalTransport.mode: poll`` a site pulls every alive peer's own
signals (seed 000). `SignalsPoller` holds one aiohttp client session whose
connector keeps one connection per peer alive between polls, so a poll costs a
request, not a handshake. Each poll sends the peer's last ``ETag`` in
``If-None-Match``; a ``304`` keeps the document already held.

What comes back is untrusted: the body is read against a size bound, decoded
and validated by `grid.core.routing.signals.parse_signals`, and kept only when
it names the peer polled as its ``site``. The server must present a
certificate the declared trust accepts as a peer; its host name is not checked,
because a peer is known by its SWIM-advertised address, and the certificate
pin or SPIFFE ID is what identifies it. A peer that stops answering keeps its
last document; eviction by age is the merge's job
(`grid.core.routing.signals.merge_pulled`).

Metric: ``grid_signals_polls_total{outcome}`` with outcome ``ok``,
``not_modified`` or ``error``.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from grid.adapters.health_server import ClosedCounter
from grid.core.routing.signals import SignalsDocument, parse_signals
from grid.core.trust import PeerClass, TrustPolicy
from grid.errors import ValidationError

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


class PollOutcome(enum.StrEnum):
    """How one poll ended; the values are the metric labels."""

    OK = "ok"
    NOT_MODIFIED = "not_modified"
    ERROR = "error"


class PollError(Exception):
    """A poll that yielded nothing usable; ``reason`` is a stable word, never peer text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UntrustedServer(aiohttp.ClientError):
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


@dataclass(frozen=True)
class Pulled:
    """The last document pulled from one peer, with the ETag it came with."""

    document: SignalsDocument
    etag: str | None


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
        self._trust = trust
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._body_bytes_max = body_bytes_max
        self._session: aiohttp.ClientSession | None = None
        self.pulled: dict[str, Pulled] = {}
        self.polls = ClosedCounter(
            "grid_signals_polls_total",
            "Polls of peers' signals endpoints, by outcome.",
            "outcome",
            [o.value for o in PollOutcome],
            registry,
        )

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = _TrustedConnector(
                self._trust, ssl=self.ssl_context, limit_per_host=1, keepalive_timeout=KEEPALIVE_S
            )
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    def documents(self) -> dict[str, SignalsDocument]:
        """The last good document of every peer polled, by peer site."""
        return {peer: p.document for peer, p in self.pulled.items()}

    async def poll(self, peer: str, address: str) -> PollOutcome:
        """Poll one peer at ``host:port``; never raises for what the peer does."""
        try:
            outcome = await self._poll(peer, address)
        except PollError as exc:
            log.debug("signals poll failed: %s", exc.reason, extra={"peer": peer})
            outcome = PollOutcome.ERROR
        except UntrustedServer:
            log.debug("signals poll failed: untrusted_server", extra={"peer": peer})
            outcome = PollOutcome.ERROR
        except (aiohttp.ClientError, OSError, TimeoutError, ssl.SSLError) as exc:
            log.debug("signals poll failed: %s", type(exc).__name__, extra={"peer": peer})
            outcome = PollOutcome.ERROR
        self.polls.inc(outcome.value)
        return outcome

    async def _poll(self, peer: str, address: str) -> PollOutcome:
        held = self.pulled.get(peer)
        headers = {"Accept": "application/json"}
        if held is not None and held.etag is not None:
            headers["If-None-Match"] = held.etag
        url = f"https://{address}/v1/site/signals?scope=site"
        async with self._client().get(url, headers=headers, allow_redirects=False) as resp:
            if resp.status == 304:
                if held is None:
                    raise PollError("unexpected_not_modified")
                return PollOutcome.NOT_MODIFIED
            if resp.status != 200:
                raise PollError("status")
            body = await self._read(resp)
            etag = resp.headers.get("ETag")
        try:
            document = parse_signals(json.loads(body))
        except (ValueError, RecursionError, ValidationError) as exc:
            raise PollError("invalid_document") from exc
        if document.site != peer:
            raise PollError("wrong_site")
        self.pulled[peer] = Pulled(document, etag)
        return PollOutcome.OK

    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        if (resp.content_length or 0) > self._body_bytes_max:
            raise PollError("too_large")
        chunks, total = [], 0
        while chunk := await resp.content.readany():
            total += len(chunk)
            if total > self._body_bytes_max:
                raise PollError("too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    def forget(self, peer: str) -> None:
        """Drop a peer's document (it left the grid's trust)."""
        self.pulled.pop(peer, None)

    async def close(self) -> None:
        """Close the kept-alive connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None
