"""The gateway's ingest-feedback reporter (SPEC-DECISIONS §7, seed 000).

Under ``signalTransport.mode: poll`` the gateway tells its site's operator how
its overlay ingests went, with an empty-body ``POST /v1/site/signals/ingest``
over mTLS with the site's own certificate. `FeedbackReporter` is the state that
makes those reports safe to lose and to repeat:

* it keeps its reporter ID, its epoch (this process's incarnation) and its
  sequence, and a cumulative count of rejected ingests within the epoch;
* every recorded ingest makes a new report, which supersedes the unacknowledged
  one: the counter is cumulative, so the newest report carries all the evidence
  of the older ones, and nothing is dropped by sending only the newest;
* a report is acknowledged only by a 204 whose ``x-grid-ingest-epoch`` and
  ``x-grid-ingest-sequence`` echo exactly what was sent; anything else (an
  older operator's 404 or 405, a 5xx, no answer at all, a 204 that echoes
  something else) keeps it pending, to be re-sent after a capped exponential
  backoff with jitter;
* a 409 means the operator holds a different history for this epoch (a
  restarted process reusing an epoch, say): the reporter starts a new epoch,
  carrying its counter, so the operator sees the evidence afresh.

GET polling of ``/v1/site/signals`` is separate and unaffected: against an
operator without feedback the reporter just keeps its evidence and retries.
Clock, sleep and randomness are injected, so tests drive it in virtual time.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from grid.core.signals.feedback import EPOCH, SEQUENCE, U64_MAX, Report, report_headers

log = logging.getLogger(__name__)

INGEST_PATH = "/v1/site/signals/ingest"
_NOT_REPORTER = re.compile(r"[^A-Za-z0-9._-]")


def default_reporter_id() -> str:
    """This host's name as a reporter identity (1-64 of ``[A-Za-z0-9._-]``)."""
    name = _NOT_REPORTER.sub("-", socket.gethostname())[:64]
    return name or "gateway"


def default_epoch() -> int:
    """A new process incarnation: nanoseconds since the epoch, so a restart counts higher."""
    return time.time_ns()


@dataclass(frozen=True)
class ReporterSettings:
    """The reporter's retry limits."""

    initial_backoff_s: float = 0.5
    """Delay before the first retry. Shorter recovers sooner after a blip but loads a
    struggling operator more."""
    max_backoff_s: float = 30.0
    """Cap of the doubling delay. Longer is gentler on an operator without feedback;
    shorter delivers evidence sooner once it returns."""
    request_timeout_s: float = 10.0
    """Seconds one POST may take, above the operator's 5 s budget so its 504 arrives."""

    def __post_init__(self) -> None:
        if not 0 < self.initial_backoff_s <= self.max_backoff_s:
            raise ValueError("backoff must satisfy 0 < initial_backoff_s <= max_backoff_s")


class Delivery(enum.Enum):
    """What one send of the pending report achieved."""

    ACKED = "acked"
    RETRY = "retry"
    NEW_EPOCH = "new_epoch"
    NOTHING_PENDING = "nothing_pending"


class IngestTransport(Protocol):
    """Sends one report's headers; returns (status, headers), or None when unreachable."""

    async def post(self, headers: Mapping[str, str]) -> tuple[int, Mapping[str, str]] | None:
        """POST an empty body with ``headers``."""
        ...


class HttpIngestTransport:
    """The real transport: aiohttp over mTLS with the site's own certificate."""

    def __init__(self, operator: str, ssl_context: ssl.SSLContext, timeout_s: float) -> None:
        self.url = f"https://{operator}{INGEST_PATH}"
        self._ssl = ssl_context
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def post(self, headers: Mapping[str, str]) -> tuple[int, Mapping[str, str]] | None:
        """POST with an empty body; None when the operator cannot be reached or timed out."""
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._ssl, limit=1)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        try:
            async with self._session.post(self.url, headers=dict(headers), data=b"") as resp:
                await resp.read()
                return resp.status, dict(resp.headers)
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None

    async def close(self) -> None:
        """Close the keep-alive connection."""
        if self._session is not None:
            await self._session.close()
            self._session = None


class FeedbackReporter:
    """One gateway process's reporter: its evidence, its pending report, its retries."""

    def __init__(
        self,
        transport: IngestTransport,
        *,
        reporter_id: str | None = None,
        replica: str = "gateway",
        epoch: int | None = None,
        settings: ReporterSettings | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.transport = transport
        self.reporter_id = reporter_id or default_reporter_id()
        self.replica = replica
        self.epoch = default_epoch() if epoch is None else epoch
        self.settings = settings or ReporterSettings()
        self._rng = rng or random.Random()
        self._sleep = sleep
        self.sequence = 0
        self.rejected = 0
        self.clean = True
        self.pending: Report | None = None
        """The newest report not yet acknowledged (it carries all older evidence)."""
        self.acknowledged: Report | None = None
        self.failures = 0
        """Consecutive sends without an acknowledgement."""
        self._wake = asyncio.Event()

    def record(self, accepted: bool) -> Report:
        """Record one completed ingest (accepted or rejected) and queue its report."""
        if not accepted and self.rejected < U64_MAX:
            self.rejected += 1
        self.clean = accepted
        return self._next_report()

    def _next_report(self) -> Report:
        if self.sequence >= U64_MAX - 1:
            # The maximum is reserved for terminal rejected evidence: begin a new epoch.
            self.epoch, self.sequence = self.epoch + 1, 0
        self.sequence += 1
        clean = self.clean and U64_MAX not in (self.sequence, self.rejected)
        self.pending = Report(
            self.reporter_id, self.replica, self.epoch, self.sequence, self.rejected, clean
        )
        self._wake.set()
        return self.pending

    def backoff_s(self) -> float:
        """The delay before the next retry: doubling from the initial delay, capped, with
        jitter over its upper half so that many gateways do not retry in step."""
        s = self.settings
        ceiling = min(s.max_backoff_s, s.initial_backoff_s * 2 ** max(0, self.failures - 1))
        return self._rng.uniform(ceiling / 2, ceiling)

    async def send_once(self) -> Delivery:
        """Send the pending report once and judge the answer."""
        report = self.pending
        if report is None:
            return Delivery.NOTHING_PENDING
        answer = await self.transport.post(report_headers(report))
        if answer is not None:
            status, headers = answer
            echoed = {k.lower(): v for k, v in headers.items()}
            if (
                status == 204
                and echoed.get(EPOCH) == str(report.epoch)
                and echoed.get(SEQUENCE) == str(report.sequence)
            ):
                self.acknowledged = report
                if self.pending == report:
                    self.pending = None
                self.failures = 0
                return Delivery.ACKED
            if status == 409:
                # Another history holds this epoch at the operator: start afresh, carrying
                # the counter so that the evidence is seen again rather than lost.
                self.failures += 1
                self.epoch, self.sequence = self.epoch + 1, 0
                self._next_report()
                return Delivery.NEW_EPOCH
        self.failures += 1
        log.info(
            "ingest feedback not acknowledged; retrying",
            extra={"status": answer[0] if answer is not None else "unreachable"},
        )
        return Delivery.RETRY

    async def run(self) -> None:
        """Deliver reports forever: wait for one, send it, back off while unacknowledged."""
        while True:
            if self.pending is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            outcome = await self.send_once()
            if outcome in (Delivery.RETRY, Delivery.NEW_EPOCH):
                await self._sleep(self.backoff_s())
