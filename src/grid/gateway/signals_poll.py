"""The gateway's poll of its operator: ``GET /v1/site/signals?scope=grid`` over mTLS.

Under ``signalTransport.mode: poll`` the gateway ranks from what it pulls
(§11). `OperatorSignals` keeps one keep-alive mTLS connection to its
operator's signals listener, presenting the site certificate, and sends the
last ``ETag`` in ``If-None-Match`` so an unchanged document costs a ``304``
and no body. `grid.adapters.signals_client.SignalsClient`, the operator's
client too, reads the body against a size bound, decodes and validates it.

A failed poll (unreachable, a non-200/304 answer, an invalid or oversized
document) keeps the last good document and waits longer before the next
attempt: the interval doubles per consecutive failure up to
``signals_backoff_max_s``, with jitter so gateways that lost one operator do
not come back in step. Outcomes are counted under ``ok``, ``not_modified`` and
``error``; nothing the server sent is logged.

A document that arrived is an ingest: ``on_ingest(True)`` when it was taken,
``on_ingest(False)`` when it was refused (invalid or oversized), which the
gateway reports as ingest feedback (§7). A ``304`` or a failure to reach the
operator ingests nothing.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from grid.adapters.signals_client import (
    POLL_ERRORS,
    REFUSED_DOCUMENT,
    PollFailed,
    PollOutcome,
    Pulled,
    SignalsClient,
)
from grid.core.routing.signals import SignalsDocument
from grid.gateway.metrics import SIGNALS_POLLS, Tally
from grid.gateway.settings import GatewaySettings

log = logging.getLogger(__name__)

SIGNALS_PATH = "/v1/site/signals?scope=grid"
"""The merged view (own and pulled entries) the gateway ranks from (§6)."""


@dataclass(frozen=True)
class SiteCredentials:
    """The site's certificate and key, and the grid CA that signs the operator's."""

    cert: Path
    key: Path
    ca: Path

    def client_context(self) -> ssl.SSLContext:
        """A TLS client context presenting the site certificate, verifying the operator."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca))
        context.load_cert_chain(str(self.cert), str(self.key))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context


def backoff_s(failures: int, interval_s: float, cap_s: float, rng: random.Random) -> float:
    """Seconds before the next poll after ``failures`` consecutive failures.

    ``interval_s`` when healthy; otherwise ``interval_s * 2**failures`` capped
    at ``cap_s``, scaled by a jitter factor in [0.5, 1].
    """
    if failures <= 0:
        return interval_s
    base = min(cap_s, interval_s * 2.0 ** min(failures, 32))
    return base * (0.5 + 0.5 * rng.random())


class OperatorSignals:
    """Polls one operator's signals listener and keeps the last good document."""

    def __init__(
        self,
        address: str,
        credentials: SiteCredentials,
        settings: GatewaySettings,
        on_change: Callable[[SignalsDocument], None] = lambda _doc: None,
        rng: random.Random | None = None,
        outcomes: Mapping[str, Tally] | None = None,
        on_ingest: Callable[[bool], None] = lambda _accepted: None,
    ) -> None:
        self.address = address
        self.url = f"https://{address}{SIGNALS_PATH}"
        self._settings = settings
        self._on_change = on_change
        self._on_ingest = on_ingest
        self._rng = rng or random.Random()
        tls, s = credentials.client_context(), settings

        def connector() -> aiohttp.BaseConnector:
            return aiohttp.TCPConnector(ssl=tls, limit=1, keepalive_timeout=s.signals_keepalive_s)

        self._client = SignalsClient(connector, s.signals_timeout_s, s.signals_body_max_bytes)
        self._pulled: Pulled | None = None
        self.failures = 0
        """Consecutive failed polls (0 after any success)."""
        self.outcomes = outcomes or {o: Tally() for o in SIGNALS_POLLS}
        """Polls by outcome (the gateway passes its metric's tallies)."""

    async def poll_once(self) -> PollOutcome:
        """One poll; returns its outcome and never raises for what the operator does."""
        try:
            outcome = await self._poll()
        except PollFailed as exc:
            log.warning("signals poll failed", extra={"reason": exc.reason})
            outcome = PollOutcome.ERROR
            if exc.reason in REFUSED_DOCUMENT:
                self._on_ingest(False)
        except POLL_ERRORS as exc:
            log.warning("signals poll failed", extra={"reason": type(exc).__name__})
            outcome = PollOutcome.ERROR
        self.failures = self.failures + 1 if outcome is PollOutcome.ERROR else 0
        self.outcomes[outcome].inc()
        return outcome

    async def _poll(self) -> PollOutcome:
        pulled = await self._client.fetch(self.url, self._pulled)
        if pulled is None:
            return PollOutcome.NOT_MODIFIED
        self._pulled = pulled
        self._on_change(pulled.document)
        self._on_ingest(True)
        return PollOutcome.OK

    @property
    def document(self) -> SignalsDocument | None:
        """The last good document, None before the first."""
        return None if self._pulled is None else self._pulled.document

    def next_delay_s(self) -> float:
        """Seconds until the next poll, backing off after failures."""
        s = self._settings
        return backoff_s(
            self.failures, s.signals_poll_interval_s, s.signals_backoff_max_s, self._rng
        )

    async def run(self) -> None:
        """Poll until cancelled."""
        while True:
            await self.poll_once()
            await asyncio.sleep(self.next_delay_s())

    async def close(self) -> None:
        """Close the kept-alive connection."""
        await self._client.close()
