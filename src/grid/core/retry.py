"""Retrying a store write: which failures are worth another try, and how long to wait.

Pure decisions; the operator's adapters do the I/O and the sleeping, with the
clock and the random source injected:

* `classify` names a failed write's reason from a closed set (the label of the
  write-failure counter) and says whether trying again can help: a throttled
  (429) or failing (5xx) API server, a timeout and a reset connection can pass,
  and so can a conflict (409), after the caller reads again. A refusal (403),
  a missing object (404), an expired version (410) or an invalid object (422)
  stays until someone changes something, so it is reported at once.
* `Backoff` is the capped, jittered exponential delay between two tries, never
  sooner than the server's ``Retry-After``; a ``Retry-After`` longer than the
  cap is not waited out inside one write, the write is given up and tried
  again by a later round.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from grid.errors import AlreadyExists, Conflict, GridError, NotFound, ValidationError


class WriteReason(enum.StrEnum):
    """Why a write failed (the closed label set of ``grid_operator_write_failures_total``)."""

    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    GONE = "gone"
    INVALID = "invalid"
    THROTTLED = "throttled"
    SERVER_ERROR = "server_error"
    UNAVAILABLE = "unavailable"
    TIMEOUT = "timeout"
    RESET = "reset"
    OTHER = "other"


TRANSIENT = frozenset(
    {
        WriteReason.CONFLICT,
        WriteReason.THROTTLED,
        WriteReason.SERVER_ERROR,
        WriteReason.UNAVAILABLE,
        WriteReason.TIMEOUT,
        WriteReason.RESET,
    }
)
"""Reasons another try can get past without anyone changing anything."""

_BY_STATUS = {
    403: WriteReason.FORBIDDEN,
    401: WriteReason.FORBIDDEN,
    404: WriteReason.NOT_FOUND,
    409: WriteReason.CONFLICT,
    410: WriteReason.GONE,
    422: WriteReason.INVALID,
    400: WriteReason.INVALID,
    429: WriteReason.THROTTLED,
    503: WriteReason.UNAVAILABLE,
}
_BY_CODE = {
    "forbidden": WriteReason.FORBIDDEN,
    "expired": WriteReason.GONE,
    "store_unavailable": WriteReason.UNAVAILABLE,
    "store_closed": WriteReason.UNAVAILABLE,
}


@dataclass(frozen=True)
class Failure:
    """One failed write as the policy sees it."""

    reason: WriteReason
    retry_after_s: float | None = None
    """The server's ``Retry-After``, when it sent one."""

    @property
    def transient(self) -> bool:
        """Whether another try may succeed without a change by anyone."""
        return self.reason in TRANSIENT


def classify(exc: BaseException) -> Failure:
    """The reason of a failed write, from the exception the store raised."""
    retry_after = getattr(exc, "retry_after_s", None)
    status = getattr(exc, "status", None)
    if isinstance(status, int) and not isinstance(exc, Conflict | NotFound):
        if status in _BY_STATUS:
            return Failure(_BY_STATUS[status], retry_after)
        if status >= 500:
            return Failure(WriteReason.SERVER_ERROR, retry_after)
    if isinstance(exc, Conflict | AlreadyExists):
        return Failure(WriteReason.CONFLICT)
    if isinstance(exc, NotFound):
        return Failure(WriteReason.NOT_FOUND)
    if isinstance(exc, ValidationError):
        return Failure(WriteReason.INVALID)
    if isinstance(exc, TimeoutError):
        return Failure(WriteReason.TIMEOUT)
    if isinstance(exc, ConnectionError | EOFError):
        return Failure(WriteReason.RESET)
    if isinstance(exc, GridError) and exc.code in _BY_CODE:
        return Failure(_BY_CODE[exc.code], retry_after)
    return Failure(WriteReason.OTHER, retry_after)


@dataclass(frozen=True)
class Backoff:
    """Capped, jittered exponential back-off between the tries of one write."""

    base_s: float = 0.05
    """The first delay; each further try doubles it."""
    cap_s: float = 2.0
    """The longest wait inside one write: a round is never held up longer per try."""
    attempts: int = 3
    """Tries of one write before it is reported failed (the next round tries again)."""
    round_cap_s: float = 5.0
    """The longest wait before a failed round is run again (a store down for a while is
    tried every few seconds, not hammered, and found again soon once it is back)."""

    def delay_s(self, attempt: int, unit: float, retry_after_s: float | None = None) -> float:
        """The wait before try ``attempt + 1`` (0-based ``attempt``); ``unit`` in [0, 1).

        Between half and the whole of ``min(cap, base * 2**attempt)``, and never
        sooner than ``retry_after_s``.
        """
        ceiling = min(self.cap_s, self.base_s * (2**attempt))
        jittered = ceiling * (0.5 + 0.5 * min(max(unit, 0.0), 1.0))
        return float(max(jittered, retry_after_s or 0.0))

    def next_delay_s(self, attempt: int, failure: Failure, unit: float) -> float | None:
        """The wait before another try of a write whose try ``attempt`` failed, or None
        when the write is to be reported failed now (not transient, out of tries, or
        a ``Retry-After`` longer than the cap)."""
        if not failure.transient or attempt + 1 >= self.attempts:
            return None
        if failure.retry_after_s is not None and failure.retry_after_s > self.cap_s:
            return None
        return self.delay_s(attempt, unit, failure.retry_after_s)

    def round_delay_s(self, failures: int, unit: float, retry_after_s: float | None) -> float:
        """The wait before the next round after ``failures`` (>= 1) failed rounds in a row:
        the same law, capped at ``round_cap_s``, honouring any ``Retry-After``."""
        ceiling = min(self.round_cap_s, self.base_s * (2 ** min(failures, 30)))
        jittered = ceiling * (0.5 + 0.5 * min(max(unit, 0.0), 1.0))
        return float(max(jittered, retry_after_s or 0.0))
