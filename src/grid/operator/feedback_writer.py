"""The feedback writer: one writer that persists admitted reports with optimistic concurrency.

Every ingest report goes through `FeedbackWriter.submit`, under one lock, so
publication is serialized: the lock holder reads the GridNetwork, lets the
pure `grid.core.signals.feedback.FeedbackBook` decide every waiting report in arrival
order, and writes the reporter states and the ``GatewayIngest`` condition
together in one status merge patch that carries the resourceVersion it read.
Reports that queue up behind a write share the next one (a group commit), so
the durable write, not the request rate, sets the pace. A 409 from the store means someone
wrote the network meanwhile: the writer counts ``conflict``, reads again and
decides again (the report may have become a duplicate), at most
``write_attempts`` times in all, then gives up with ``conflict_exhausted``.
Any other store error, or an answer that does not show the report persisted,
is ``write_failure``. The caller answers 204 only once `submit` returns, that
is once the write is durable.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from grid.adapters.health_server import ClosedCounter
from grid.adapters.store.port import ResourceStore
from grid.core.resources import GridNetwork
from grid.core.signals.feedback import (
    CONDITION_TYPE,
    DEFAULT_REPORTER_CAPACITY,
    DEFAULT_REPORTER_IDLE_S,
    Admitted,
    ConflictExhausted,
    FeedbackBook,
    FeedbackEvent,
    FeedbackRefusal,
    Report,
    ReporterCapacity,
    ReporterState,
    WriteFailure,
    book_from_status,
    ingest_condition,
    status_patch,
)
from grid.errors import Conflict

log = logging.getLogger(__name__)

EVENTS_METRIC = "grid_gateway_feedback_events_total"
EVICTIONS_METRIC = "grid_gateway_feedback_reporters_evicted"
"""Prometheus adds ``_total``: ``grid_gateway_feedback_reporters_evicted_total``."""


@dataclass(frozen=True)
class FeedbackSettings:
    """The limits of gateway ingest feedback, with the spec's defaults (§7)."""

    reporter_capacity: int = DEFAULT_REPORTER_CAPACITY
    """Reporters persisted per GridNetwork; a new identity past it gets 429. More
    admits more gateway processes at the cost of a larger status object."""
    reporter_idle_s: float = DEFAULT_REPORTER_IDLE_S
    """Seconds without a report after which a full book gives a reporter's slot to a new
    identity. Shorter frees slots of vanished gateways sooner; longer keeps a quiet
    reporter's evidence visible longer."""
    write_attempts: int = 3
    """Attempts in all of the optimistic status write when the store answers 409.
    More rides out busier writers but spends more of the 5 s request budget."""

    def __post_init__(self) -> None:
        if self.reporter_capacity < 1:
            raise ValueError("reporter_capacity must be at least 1")
        if self.reporter_idle_s <= 0:
            raise ValueError("reporter_idle_s must be positive")
        if self.write_attempts < 1:
            raise ValueError("write_attempts must be at least 1")


class FeedbackEvents:
    """``grid_gateway_feedback_events_total{event}``: exactly the five events, no other label."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._counter = ClosedCounter(
            EVENTS_METRIC,
            "Gateway ingest feedback events: store conflicts, exhausted retries, reporter "
            "overflow, unauthorized submitters and write failures.",
            "event",
            [e.value for e in FeedbackEvent],
            registry,
        )
        self._evictions = Counter(
            EVICTIONS_METRIC,
            "Idle gateway reporters whose slots went to new reporter identities.",
            registry=registry,
        )

    def inc(self, event: FeedbackEvent) -> None:
        """Count one event."""
        self._counter.inc(event.value)

    def value(self, event: FeedbackEvent) -> float:
        """The current count of one event."""
        return self._counter.value(event.value)

    def evicted(self, count: int) -> None:
        """Count reporters whose idle slots went to new identities."""
        if count:
            self._evictions.inc(count)


@dataclass
class _Pending:
    """One report waiting for the writer, and where its answer goes."""

    report: Report
    now: dt.datetime
    answer: asyncio.Future[ReporterState]


def _answer(item: _Pending, answer: ReporterState | FeedbackRefusal) -> None:
    if item.answer.done():
        return
    if isinstance(answer, FeedbackRefusal):
        item.answer.set_exception(answer)
    else:
        item.answer.set_result(answer)


def _fail_all(batch: list[_Pending], failure: FeedbackRefusal) -> None:
    for item in batch:
        _answer(item, type(failure)(failure.message))


def _timestamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FeedbackWriter:
    """The single writer of one GridNetwork's gateway feedback."""

    def __init__(
        self,
        store: ResourceStore,
        network: str,
        events: FeedbackEvents,
        settings: FeedbackSettings | None = None,
    ) -> None:
        self.store = store
        self.network = network
        self.events = events
        self.settings = settings or FeedbackSettings()
        self._lock = asyncio.Lock()
        self._queue: list[_Pending] = []

    async def submit(self, report: Report, now: dt.datetime) -> ReporterState:
        """Admit and persist ``report``; return the reporter's durable state.

        Raises the report's refusal (409 or 429), `ConflictExhausted` or
        `WriteFailure`. An exact duplicate returns the persisted state without
        writing anything. Reports that arrive while a write is in flight wait
        for the lock; whoever takes it next publishes every waiting report in
        arrival order, in one write (a group commit), so one fsync serves many.
        """
        pending = _Pending(report, now, asyncio.get_running_loop().create_future())
        self._queue.append(pending)
        try:
            async with self._lock:
                if not pending.answer.done():
                    batch, self._queue = self._queue, []
                    try:
                        await self._publish([p for p in batch if not p.answer.done()])
                    finally:
                        # Cut off mid-batch (this request's budget ran out): the
                        # others are still waiting for the lock and publish them.
                        self._queue[:0] = [p for p in batch if not p.answer.done()]
        except asyncio.CancelledError:
            pending.answer.cancel()
            raise
        return pending.answer.result()

    async def _publish(self, batch: list[_Pending]) -> None:
        """Decide every report of ``batch`` on a fresh read and write the admitted ones."""
        for _attempt in range(self.settings.write_attempts):
            try:
                network, resource_version = await self._read()
            except WriteFailure as failure:
                _fail_all(batch, failure)
                return
            book = book_from_status(
                network.status.gateway_feedback if network.status else None,
                self.settings.reporter_capacity,
                self.settings.reporter_idle_s,
            )
            answers: list[tuple[_Pending, ReporterState | FeedbackRefusal]] = []
            admitted, evicted = False, 0
            for item in batch:
                try:
                    outcome = book.admit(item.report, _timestamp(item.now))
                except FeedbackRefusal as refusal:
                    answers.append((item, refusal))
                    continue
                if isinstance(outcome, Admitted):
                    book, admitted = outcome.book, True
                    evicted += outcome.evicted is not None
                answers.append((item, outcome.state))
            if admitted:
                now = max(item.now for item in batch)
                patch = status_patch(
                    network.status, book, _timestamp(now), network.metadata.generation
                )
                try:
                    stored = await self.store.patch_status(
                        "GridNetwork", self.network, patch, resource_version
                    )
                except Conflict:
                    self.events.inc(FeedbackEvent.CONFLICT)
                    continue
                except Exception as exc:
                    self._failed("the status write failed", type(exc).__name__)
                    _fail_all(batch, WriteFailure("the store refused the status write"))
                    return
                try:
                    self._verify(stored, book)
                except WriteFailure as failure:
                    _fail_all(batch, failure)
                    return
            self.events.evicted(evicted)
            for item, answer in answers:
                if isinstance(answer, ReporterCapacity):
                    self.events.inc(FeedbackEvent.OVERFLOW)
                _answer(item, answer)
            return
        self.events.inc(FeedbackEvent.CONFLICT_EXHAUSTED)
        _fail_all(
            batch,
            ConflictExhausted(
                f"the status write met a newer resourceVersion {self.settings.write_attempts} times"
            ),
        )

    async def _read(self) -> tuple[GridNetwork, str]:
        try:
            obj = await self.store.get("GridNetwork", self.network)
            network = GridNetwork.model_validate(obj)
        except Exception as exc:
            self._failed("reading the network failed", type(exc).__name__)
            raise WriteFailure("the store could not be read") from exc
        resource_version = network.metadata.resource_version
        if not resource_version:
            self._failed("the network carries no resourceVersion", "unverified")
            raise WriteFailure("the store's answer did not verify")
        return network, resource_version

    def _verify(self, stored: object, written: FeedbackBook) -> None:
        """Refuse to acknowledge unless the store's answer shows what was written."""
        try:
            network = GridNetwork.model_validate(stored)
        except Exception as exc:
            self._failed("the store answered an invalid object", type(exc).__name__)
            raise WriteFailure("the store's answer did not verify") from exc
        status = network.status
        book = book_from_status(
            status.gateway_feedback if status else None, written.capacity, written.idle_s
        )
        condition = status.condition(CONDITION_TYPE) if status else None
        expected = ingest_condition(written)
        if (
            book != written
            or condition is None
            or (condition.status, condition.reason) != (expected.status, expected.reason)
            or status is None
            or status.gateway_feedback is None
            or status.gateway_feedback.reporters_with_evidence != written.with_evidence
        ):
            self._failed("the store's answer does not show the report", "unverified")
            raise WriteFailure("the store's answer did not show the report persisted")

    def _failed(self, what: str, kind: str) -> None:
        self.events.inc(FeedbackEvent.WRITE_FAILURE)
        log.warning("feedback write failed", extra={"reason": what, "error": kind})
