"""One client of ``GET /v1/site/signals``, for the operator's and the gateway's polls.

Both the operator (polling each peer under ``signalTransport.mode: poll``) and the
gateway (polling its own operator, §11) fetch a signals document the same way,
and this module is that way: one keep-alive aiohttp session whose connector the
caller builds (trust checks and connection limits are theirs), the last
``ETag`` in ``If-None-Match`` so an unchanged document costs a ``304`` and no
body, a body read against a size bound, decoded by the project's bounded JSON
decoder and validated by `grid.core.routing.signals.parse_signals`.

What the server sends is untrusted: a failure is a `PollFailed` whose
``reason`` is a fixed word (never server text), and `PollOutcome` names how a
poll ended, as the ``grid_signals_polls_total{outcome}`` and
``grid_gateway_signals_polls_total{outcome}`` labels do.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from grid.core.json_document import DocumentError, decode_json
from grid.core.routing.signals import SignalsDocument, parse_signals
from grid.errors import GridError, ValidationError


class PollOutcome(enum.StrEnum):
    """How one poll ended; the values are the metric labels."""

    OK = "ok"
    NOT_MODIFIED = "not_modified"
    ERROR = "error"


class PollFailed(GridError):
    """A poll that yielded nothing usable; ``reason`` is a fixed word, never server text."""

    code = "poll_failed"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


REFUSED_DOCUMENT = frozenset({"invalid_document", "too_large"})
"""Failure reasons where a document arrived and was refused (a rejected ingest)."""

POLL_ERRORS = (PollFailed, aiohttp.ClientError, OSError, TimeoutError)
"""What one poll may raise for what the server or the network did (``ssl.SSLError``
is an `OSError`)."""


@dataclass(frozen=True)
class Pulled:
    """A document as it was fetched, with the ETag it came with."""

    document: SignalsDocument
    etag: str | None


class SignalsClient:
    """Fetches signals documents over one kept-alive session."""

    def __init__(
        self,
        connector: Callable[[], aiohttp.BaseConnector],
        timeout_s: float,
        body_bytes_max: int,
    ) -> None:
        self._connector = connector
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.body_bytes_max = body_bytes_max
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=self._connector(), timeout=self._timeout
            )
        return self._session

    async def fetch(self, url: str, held: Pulled | None) -> Pulled | None:
        """The document at ``url``, or None when it is ``held``'s (a ``304``).

        Raises `PollFailed` for a status other than 200 or 304 (``status_4xx``
        and so on), a 304 with nothing held, an oversized body (``too_large``) or
        an invalid document (``invalid_document``); network failures propagate
        as aiohttp's, `OSError` or `TimeoutError`.
        """
        headers = {"Accept": "application/json"}
        if held is not None and held.etag is not None:
            headers["If-None-Match"] = held.etag
        async with self._client().get(url, headers=headers, allow_redirects=False) as resp:
            if resp.status == 304:
                if held is None:
                    raise PollFailed("unexpected_not_modified")
                return None
            if resp.status != 200:
                raise PollFailed(f"status_{resp.status // 100}xx")
            body = await self._read(resp)
            etag = resp.headers.get("ETag")
        try:
            return Pulled(parse_signals(decode_json(body)), etag)
        except (DocumentError, ValidationError):
            raise PollFailed("invalid_document") from None

    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        limit = self.body_bytes_max
        if (resp.content_length or 0) > limit:
            raise PollFailed("too_large")
        chunks, total = [], 0
        while chunk := await resp.content.readany():
            total += len(chunk)
            if total > limit:
                raise PollFailed("too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    async def close(self) -> None:
        """Close the kept-alive connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None
