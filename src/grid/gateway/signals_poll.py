"""The gateway's poll of its operator: ``GET /v1/site/signals?scope=grid`` over mTLS.

Under ``signalTransport.mode: poll`` the gateway ranks from what it pulls
(§11). `OperatorSignals` keeps one keep-alive mTLS connection to its
operator's signals listener, presenting the site certificate, and sends the
last ``ETag`` in ``If-None-Match`` so an unchanged document costs a ``304``
and no body. The body is read against a size bound, decoded with the
project's bounded JSON decoder and validated by
`grid.core.routing.signals.parse_signals`.

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

from grid.core.json_document import DocumentError, decode_json
from grid.core.routing.signals import SignalsDocument, parse_signals
from grid.errors import ValidationError
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


REFUSED_DOCUMENT = frozenset({"invalid_document", "too_large"})
"""Failure reasons where a document arrived and was refused: a rejected ingest."""


class PollFailed(Exception):
    """A poll that yielded nothing usable; ``reason`` is a fixed word, never server text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
        self._ssl = credentials.client_context()
        self._settings = settings
        self._on_change = on_change
        self._on_ingest = on_ingest
        self._rng = rng or random.Random()
        self._session: aiohttp.ClientSession | None = None
        self._etag: str | None = None
        self.document: SignalsDocument | None = None
        self.failures = 0
        """Consecutive failed polls (0 after any success)."""
        self.outcomes = outcomes or {o: Tally() for o in SIGNALS_POLLS}
        """Polls by outcome (the gateway passes its metric's tallies)."""

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            s = self._settings
            connector = aiohttp.TCPConnector(
                ssl=self._ssl, limit=1, keepalive_timeout=s.signals_keepalive_s
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=s.signals_timeout_s),
            )
        return self._session

    async def poll_once(self) -> str:
        """One poll; returns its outcome and never raises for what the operator does."""
        try:
            outcome = await self._poll()
        except PollFailed as exc:
            log.warning("signals poll failed", extra={"reason": exc.reason})
            outcome = "error"
            if exc.reason in REFUSED_DOCUMENT:
                self._on_ingest(False)
        except (aiohttp.ClientError, OSError, TimeoutError, ssl.SSLError) as exc:
            log.warning("signals poll failed", extra={"reason": type(exc).__name__})
            outcome = "error"
        self.failures = self.failures + 1 if outcome == "error" else 0
        self.outcomes[outcome].inc()
        return outcome

    async def _poll(self) -> str:
        headers = {"Accept": "application/json"}
        if self._etag is not None and self.document is not None:
            headers["If-None-Match"] = self._etag
        async with self._client().get(self.url, headers=headers, allow_redirects=False) as resp:
            if resp.status == 304:
                if self.document is None:
                    raise PollFailed("unexpected_not_modified")
                return "not_modified"
            if resp.status != 200:
                raise PollFailed(f"status_{resp.status // 100}xx")
            body = await self._read(resp)
            etag = resp.headers.get("ETag")
        try:
            document = parse_signals(decode_json(body))
        except (DocumentError, ValidationError):
            raise PollFailed("invalid_document") from None
        self.document, self._etag = document, etag
        self._on_change(document)
        self._on_ingest(True)
        return "ok"

    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        limit = self._settings.signals_body_max_bytes
        if (resp.content_length or 0) > limit:
            raise PollFailed("too_large")
        chunks, total = [], 0
        while chunk := await resp.content.readany():
            total += len(chunk)
            if total > limit:
                raise PollFailed("too_large")
            chunks.append(chunk)
        return b"".join(chunks)

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
        if self._session is not None:
            await self._session.close()
            self._session = None
