"""Gateway ingest feedback: the version-1 headers and the per-reporter evidence machine.

A gateway reports its overlay ingests with an empty-body
``POST /v1/site/signals/ingest`` (seed 000, SPEC-DECISIONS §7). This module is the
pure part of that endpoint:

* `parse_report` turns the request's headers into a `Report`, or raises one of
  the 400 refusals below. It never echoes a header value in a message.
* `FeedbackBook` holds every persisted reporter's `ReporterState` and `admit`
  decides what a report does to it: a new state to persist, an exact duplicate
  (answered 204 with nothing written, so freshness is not renewed), or a 409 or
  429 refusal. The rules are seed 000's:

  - a rise of the cumulative rejected counter records rejection evidence, even
    when ``clean`` says true;
  - a strictly newer clean report with the same counter clears that reporter's
    evidence only (a newer report that is not clean holds or sets it);
  - an exact duplicate changes nothing;
  - an older epoch or sequence is a ``replay``, the same sequence with other
    fields a ``changed_duplicate``, a lower counter ``counter_decreased``;
  - a new epoch starts that reporter afresh, as if its counters were zero.

`ingest_condition` derives the ``GatewayIngest`` condition from a book, so the
reporter states and the condition are always computed, and written, together.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from grid.core.resources.status import (
    GatewayFeedbackStatus,
    GatewayReporterStatus,
    GridNetworkStatus,
)
from grid.errors import Refusal

U64_MAX = 18446744073709551615
"""Reserved in sequence or rejected for terminal rejected evidence (never clean)."""

HEADER_PREFIX = "x-grid-ingest-"
VERSION = "x-grid-ingest-version"
REPORTER = "x-grid-ingest-reporter"
REPLICA = "x-grid-ingest-replica"
EPOCH = "x-grid-ingest-epoch"
SEQUENCE = "x-grid-ingest-sequence"
REJECTED = "x-grid-ingest-rejected"
CLEAN = "x-grid-ingest-clean"
REQUIRED = (VERSION, REPORTER, REPLICA, EPOCH, SEQUENCE, REJECTED, CLEAN)
"""The version-1 headers, each required exactly once."""

SUPPORTED_VERSION = 1
CONDITION_TYPE = "GatewayIngest"
DEFAULT_REPORTER_CAPACITY = 64
"""Persisted reporters per GridNetwork (SPEC-DECISIONS §7)."""
DEFAULT_REPORTER_IDLE_S = 3600.0
"""Seconds without an admitted report after which a reporter's slot may go to a new
identity when the book is full (see `FeedbackBook.admit`)."""

_U64_DIGITS_MAX = 20
_DECIMAL = re.compile(r"[0-9]{1,20}")
_REPORTER = re.compile(r"[A-Za-z0-9._-]{1,64}")
_REPLICA = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class FeedbackRefusal(Refusal):
    """A refused ingest report; ``code`` and ``status`` are its wire answer."""


class MalformedMetadata(FeedbackRefusal):
    """A header is missing, repeated, non-decimal, out of range or too long."""

    code = "malformed_metadata"
    status = 400


class UnsupportedVersion(FeedbackRefusal):
    """``x-grid-ingest-version`` names a version this operator does not speak."""

    code = "unsupported_version"
    status = 400


class UnsupportedMetadata(FeedbackRefusal):
    """An ``x-grid-ingest-*`` header version 1 does not define."""

    code = "unsupported_metadata"
    status = 400


class Replay(FeedbackRefusal):
    """An older epoch, or an older sequence within the epoch."""

    code = "replay"
    status = 409


class ChangedDuplicate(FeedbackRefusal):
    """The persisted sequence again, with different fields."""

    code = "changed_duplicate"
    status = 409


class CounterDecreased(FeedbackRefusal):
    """A newer sequence whose cumulative rejected counter went down."""

    code = "counter_decreased"
    status = 409


class ReporterCapacity(FeedbackRefusal):
    """A new reporter identity while the persisted reporters are at capacity."""

    code = "reporter_capacity"
    status = 429


class BodyNotEmpty(FeedbackRefusal):
    """The request carries a body byte or a chunked body; it is never read."""

    code = "body_not_empty"
    status = 413


class Unauthorized(FeedbackRefusal):
    """The caller is not Local (the site's own certificate)."""

    code = "unauthorized"
    status = 403


class WriteFailure(FeedbackRefusal):
    """The store refused the write for another reason than a conflict, or its answer
    did not show the report persisted."""

    code = "write_failure"
    status = 503


class ConflictExhausted(FeedbackRefusal):
    """Every attempt of the optimistic status write met a newer resourceVersion."""

    code = "conflict_exhausted"
    status = 503


class BudgetExceeded(FeedbackRefusal):
    """Reading, admission and the write did not finish within the request budget."""

    code = "budget_exceeded"
    status = 504


class FeedbackEvent(enum.StrEnum):
    """The events ``grid_gateway_feedback_events_total{event}`` counts (a closed set)."""

    CONFLICT = "conflict"
    """One store 409 (a resourceVersion race) on the status write."""
    CONFLICT_EXHAUSTED = "conflict_exhausted"
    """Every attempt of one report met a conflict."""
    OVERFLOW = "overflow"
    """A new reporter identity refused at capacity."""
    UNAUTHORIZED = "unauthorized"
    """A caller that is not Local submitted feedback."""
    WRITE_FAILURE = "write_failure"
    """Any other store error, or a store answer that did not show the write."""


@dataclass(frozen=True)
class Report:
    """One parsed version-1 report."""

    reporter: str
    replica: str
    epoch: int
    sequence: int
    rejected: int
    clean: bool


@dataclass(frozen=True)
class ReporterState:
    """What is persisted for one reporter: its last admitted report and its evidence."""

    reporter: str
    replica: str
    epoch: int
    sequence: int
    rejected: int
    clean: bool
    evidence: bool
    last_report_time: str | None = None
    """When the last admitted (non-duplicate) report arrived: its freshness."""

    def same_report(self, report: Report) -> bool:
        """True when ``report`` is exactly the report this state was built from."""
        return (
            self.replica == report.replica
            and self.epoch == report.epoch
            and self.sequence == report.sequence
            and self.rejected == report.rejected
            and self.clean == report.clean
        )


def _one(headers: Mapping[str, list[str]], name: str) -> str:
    values = headers.get(name, [])
    if len(values) != 1:
        word = "missing" if not values else "repeated"
        raise MalformedMetadata(f"{name} is {word}; version 1 needs it exactly once")
    return values[0]


def _u64(headers: Mapping[str, list[str]], name: str) -> int:
    raw = _one(headers, name)
    if len(raw) > _U64_DIGITS_MAX:
        raise MalformedMetadata(f"{name} is too long for a u64")
    if not _DECIMAL.fullmatch(raw):
        raise MalformedMetadata(f"{name} must be a u64 in decimal")
    value = int(raw)
    if value > U64_MAX:
        raise MalformedMetadata(f"{name} is out of the u64 range")
    return value


def parse_report(items: Iterable[tuple[str, str]]) -> Report:
    """Parse a request's headers (every name-value pair, repeats included).

    Checks run in this order: the version header (present once, decimal,
    supported), unknown ``x-grid-ingest-*`` headers, then every other field.
    The version goes first so that a newer reporter learns it spoke a newer
    version, not that its new headers are unknown.
    """
    grouped: dict[str, list[str]] = {}
    for name, value in items:
        lowered = name.lower()
        if lowered.startswith(HEADER_PREFIX):
            grouped.setdefault(lowered, []).append(value)
    raw_version = _one(grouped, VERSION)
    if len(raw_version) > _U64_DIGITS_MAX or not _DECIMAL.fullmatch(raw_version):
        raise MalformedMetadata(f"{VERSION} must be a decimal version number")
    if int(raw_version) != SUPPORTED_VERSION:
        raise UnsupportedVersion(f"only ingest version {SUPPORTED_VERSION} is supported")
    unknown = sorted(set(grouped) - set(REQUIRED))
    if unknown:
        # Header names this operator does not define are not echoed: only their count.
        raise UnsupportedMetadata(f"{len(unknown)} x-grid-ingest-* header(s) version 1 lacks")
    reporter = _one(grouped, REPORTER)
    if not _REPORTER.fullmatch(reporter):
        raise MalformedMetadata(f"{REPORTER} must be 1-64 of [A-Za-z0-9._-]")
    replica = _one(grouped, REPLICA)
    if not _REPLICA.fullmatch(replica):
        raise MalformedMetadata(f"{REPLICA} must be a DNS label of 1-63 characters")
    clean_raw = _one(grouped, CLEAN)
    if clean_raw not in ("true", "false"):
        raise MalformedMetadata(f"{CLEAN} must be true or false")
    report = Report(
        reporter=reporter,
        replica=replica,
        epoch=_u64(grouped, EPOCH),
        sequence=_u64(grouped, SEQUENCE),
        rejected=_u64(grouped, REJECTED),
        clean=clean_raw == "true",
    )
    if report.clean and U64_MAX in (report.sequence, report.rejected):
        raise MalformedMetadata("the u64 maximum is reserved for rejected evidence, never clean")
    return report


def report_headers(report: Report) -> dict[str, str]:
    """The version-1 headers that carry ``report`` (what a reporter sends)."""
    return {
        VERSION: str(SUPPORTED_VERSION),
        REPORTER: report.reporter,
        REPLICA: report.replica,
        EPOCH: str(report.epoch),
        SEQUENCE: str(report.sequence),
        REJECTED: str(report.rejected),
        CLEAN: "true" if report.clean else "false",
    }


def echo_headers(report: Report) -> dict[str, str]:
    """The headers a 204 echoes once the report is durable."""
    return {EPOCH: str(report.epoch), SEQUENCE: str(report.sequence)}


@dataclass(frozen=True)
class Admitted:
    """The report moves its reporter to ``state``: persist ``book``, then answer 204."""

    book: FeedbackBook
    state: ReporterState
    evicted: str | None = None
    """The idle reporter whose slot the report took, when the book was full."""


@dataclass(frozen=True)
class Duplicate:
    """The report is the one already persisted: answer 204, write nothing."""

    state: ReporterState


Admission = Admitted | Duplicate


@dataclass(frozen=True)
class FeedbackBook:
    """Every persisted reporter of one GridNetwork, at most ``capacity`` of them."""

    reporters: tuple[ReporterState, ...] = ()
    capacity: int = DEFAULT_REPORTER_CAPACITY
    idle_s: float = DEFAULT_REPORTER_IDLE_S
    """A full book gives a new identity the slot of its longest-idle reporter once that
    one has gone this long without an admitted report. Gateways that take a new ID on
    every restart then cannot lock out new gateways for good; a live reporter that is
    evicted loses nothing, as its next report carries its whole cumulative counter.
    Shorter frees slots sooner; longer keeps a quiet reporter's evidence visible longer."""

    def get(self, reporter: str) -> ReporterState | None:
        """The persisted state of one reporter, if any."""
        return next((r for r in self.reporters if r.reporter == reporter), None)

    @property
    def with_evidence(self) -> int:
        """How many reporters currently hold rejection evidence."""
        return sum(1 for r in self.reporters if r.evidence)

    def admit(self, report: Report, now: str) -> Admission:
        """Decide what ``report`` does; raise the 409 or 429 refusal when it is refused.

        ``now`` (RFC 3339, supplied by the caller) becomes the reporter's
        freshness when the report is admitted.
        """
        current = self.get(report.reporter)
        evicted: str | None = None
        if current is None:
            if len(self.reporters) >= self.capacity:
                evicted = self._evictable(now)
                if evicted is None:
                    raise ReporterCapacity("the network already holds its reporter capacity")
            baseline = 0
        elif report.epoch < current.epoch:
            raise Replay("the report's epoch is older than the persisted one")
        elif report.epoch > current.epoch:
            baseline = 0
        elif report.sequence < current.sequence:
            raise Replay("the report's sequence is older than the persisted one")
        elif report.sequence == current.sequence:
            if current.same_report(report):
                return Duplicate(current)
            raise ChangedDuplicate("the persisted sequence arrived again with other fields")
        elif report.rejected < current.rejected:
            raise CounterDecreased("the cumulative rejected counter went down")
        else:
            baseline = current.rejected
        state = ReporterState(
            reporter=report.reporter,
            replica=report.replica,
            epoch=report.epoch,
            sequence=report.sequence,
            rejected=report.rejected,
            clean=report.clean,
            evidence=report.rejected > baseline or not report.clean,
            last_report_time=now,
        )
        gone = (report.reporter, evicted)
        others = tuple(r for r in self.reporters if r.reporter not in gone)
        book = replace(self, reporters=tuple(sorted((*others, state), key=lambda r: r.reporter)))
        return Admitted(book, state, evicted)

    def _evictable(self, now: str) -> str | None:
        """The reporter idle longest, if it has been idle at least ``idle_s``.

        A state without a report time (persisted by an older operator) counts as
        the oldest; ties go to the smaller identity, so the choice is deterministic.
        """
        moment = _instant(now)
        if moment is None:
            return None
        oldest = min(
            self.reporters,
            key=lambda r: (
                _instant(r.last_report_time) or dt.datetime.min.replace(tzinfo=dt.UTC),
                r.reporter,
            ),
        )
        last = _instant(oldest.last_report_time)
        if last is not None and (moment - last).total_seconds() < self.idle_s:
            return None
        return oldest.reporter


def _instant(stamp: str | None) -> dt.datetime | None:
    """An RFC 3339 time as an aware datetime; None when absent or unreadable."""
    if not stamp:
        return None
    try:
        moment = dt.datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


@dataclass(frozen=True)
class IngestCondition:
    """The ``GatewayIngest`` condition a book implies."""

    status: Literal["True", "False"]
    reason: str
    message: str


def ingest_condition(book: FeedbackBook) -> IngestCondition:
    """``True``/``Clean`` when no reporter holds evidence, else ``False``/``RejectedEvidence``."""
    count = book.with_evidence
    if count == 0:
        return IngestCondition("True", "Clean", "no gateway reporter holds rejection evidence")
    noun = "reporter holds" if count == 1 else "reporters hold"
    message = f"{count} gateway {noun} rejection evidence"
    return IngestCondition("False", "RejectedEvidence", message)


def book_from_status(
    feedback: GatewayFeedbackStatus | None,
    capacity: int = DEFAULT_REPORTER_CAPACITY,
    idle_s: float = DEFAULT_REPORTER_IDLE_S,
) -> FeedbackBook:
    """The book persisted in a GridNetwork's ``status.gatewayFeedback``."""
    reporters = feedback.reporters if feedback is not None else []
    states = (
        ReporterState(
            reporter=r.reporter,
            replica=r.replica or "",
            epoch=int(r.epoch),
            sequence=int(r.sequence),
            rejected=int(r.rejected),
            clean=r.clean,
            evidence=r.evidence,
            last_report_time=r.last_report_time,
        )
        for r in reporters
    )
    return FeedbackBook(tuple(sorted(states, key=lambda s: s.reporter)), capacity, idle_s)


def feedback_status(book: FeedbackBook) -> GatewayFeedbackStatus:
    """The ``status.gatewayFeedback`` that persists ``book``."""
    return GatewayFeedbackStatus(
        reporters=[
            GatewayReporterStatus(
                reporter=s.reporter,
                replica=s.replica or None,
                epoch=str(s.epoch),
                sequence=str(s.sequence),
                rejected=str(s.rejected),
                clean=s.clean,
                evidence=s.evidence,
                last_report_time=s.last_report_time,
            )
            for s in book.reporters
        ],
        reporters_with_evidence=book.with_evidence,
    )


def status_patch(
    status: GridNetworkStatus | None, book: FeedbackBook, now: str, generation: int | None
) -> dict[str, Any]:
    """The one status merge patch that writes ``book`` and its condition together.

    ``conditions`` is a list, which a merge patch replaces whole, so the patch
    carries every condition of ``status`` with ``GatewayIngest`` set; the
    optimistic write it travels in makes sure no other condition changed since.
    """
    current = status.model_copy(deep=True) if status is not None else GridNetworkStatus()
    condition = ingest_condition(book)
    current.set_condition(
        CONDITION_TYPE,
        condition.status,
        reason=condition.reason,
        message=condition.message,
        now=now,
        observed_generation=generation,
    )
    return {
        "gatewayFeedback": feedback_status(book).model_dump(by_alias=True, exclude_none=True),
        "conditions": [c.model_dump(by_alias=True, exclude_none=True) for c in current.conditions],
    }
