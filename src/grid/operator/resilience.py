"""Store and API failures never end the operator: guarded writes, rounds and tasks.

* `WriteGuard.write` runs one store write (a ConfigMap, a status patch) and
  tries it again while `grid.core.retry` says another try can pass (429 after
  its ``Retry-After``, 5xx, timeouts, resets, conflicts), with capped jittered
  back-off. A write it gives up raises `WriteFailed`, which the caller turns
  into a condition or reason on the resource; each one is counted in
  ``grid_operator_write_failures_total{site,reason}``.
* `guarded_rounds` runs a loop's rounds: a round that fails anyway is logged,
  counted in ``grid_operator_round_failures_total{loop}`` and tried again
  after a back-off; the loop goes on.
* `Supervisor` runs the operator's long-lived tasks: a task that fails is
  started again after a back-off (``grid_operator_task_restarts_total{task}``),
  except a `StartupError`, which is a deliberate exit for a restart.

The clock (``sleep``) and the random source are injected, so tests decide time.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter

from grid.core.retry import Backoff, Failure, WriteReason, classify
from grid.errors import GridError
from grid.operator.startup import StartupError

log = logging.getLogger(__name__)

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]

WRITE_ERRORS: tuple[type[BaseException], ...] = (GridError, OSError, EOFError)
"""What a store write may raise on a failure (OSError covers timeouts and resets)."""


class WriteSite(enum.StrEnum):
    """The operator's write sites (the closed ``site`` label set)."""

    OVERLAY = "overlay"
    CONSUMER_CONFIG = "consumer_config"
    BUDGETS = "budgets"
    LEDGER = "ledger"
    NETWORK_STATUS = "network_status"
    SITE_STATUS = "site_status"
    PROVIDER_STATUS = "provider_status"
    EVENT = "event"
    """A phase-change Event (Kubernetes store): the API client retried it; only counted."""
    LEASE = "lease"
    """A Lease renewal (leader election): tried again every retry period until the
    renew deadline, after which the replica stops leading by design."""


class WriteFailed(GridError):
    """A store write given up after its tries; ``failure`` says why."""

    code = "write_failed"

    def __init__(self, site: WriteSite, failure: Failure) -> None:
        super().__init__(f"{site.value} write failed ({failure.reason.value})")
        self.site = site
        self.failure = failure


class _Paced:
    """The back-off, the clock and the random source a retrying piece waits by."""

    def __init__(
        self,
        backoff: Backoff | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.backoff = backoff or Backoff()
        self.sleep = sleep
        self.rng = rng or random.Random()


class WriteGuard(_Paced):
    """Retries and counts the operator's store writes."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        backoff: Backoff | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(backoff, sleep=sleep, rng=rng)
        self.failures = Counter(
            "grid_operator_write_failures",
            "Store writes given up after their tries, by write site and reason.",
            ["site", "reason"],
            registry=registry,
        )
        self.retries = Counter(
            "grid_operator_write_retries",
            "Store writes tried again after a failure, by write site and reason.",
            ["site", "reason"],
            registry=registry,
        )
        for site in WriteSite:
            for reason in WriteReason:
                self.failures.labels(site.value, reason.value)
        self.failing: dict[WriteSite, Failure] = {}
        """Each write site whose last write failed, and why (cleared by a success)."""

    def count(self, site: WriteSite, exc: BaseException) -> None:
        """Count a write that another layer already retried and gave up (an Event, a
        Lease renewal): the same counter and log line as a write given up here."""
        failure = classify(exc)
        self.failures.labels(site.value, failure.reason.value).inc()
        log.warning(
            "store write failed", extra={"write": site.value, "reason": failure.reason.value}
        )

    async def write(self, site: WriteSite, attempt_write: Callable[[], Awaitable[T]]) -> T:
        """``attempt_write()``, tried again while another try can pass; else `WriteFailed`."""
        attempt = 0
        while True:
            try:
                result = await attempt_write()
            except WRITE_ERRORS as exc:
                failure = classify(exc)
                delay = self.backoff.next_delay_s(attempt, failure, self.rng.random())
                if delay is None:
                    self.failures.labels(site.value, failure.reason.value).inc()
                    self.failing[site] = failure
                    log.warning(
                        "store write failed",
                        extra={"write": site.value, "reason": failure.reason.value},
                    )
                    raise WriteFailed(site, failure) from exc
                self.retries.labels(site.value, failure.reason.value).inc()
                await self.sleep(delay)
                attempt += 1
            else:
                self.failing.pop(site, None)
                return result


class RoundFailures(_Paced):
    """``grid_operator_round_failures_total{loop}`` and the back-off between failed rounds."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        backoff: Backoff | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(backoff, sleep=sleep, rng=rng)
        self.counter = Counter(
            "grid_operator_round_failures",
            "Reconcile rounds that failed and were tried again, by loop.",
            ["loop"],
            registry=registry,
        )
        self.restarts = Counter(
            "grid_operator_task_restarts",
            "Operator tasks started again after a failure, by task.",
            ["task"],
            registry=registry,
        )

    async def failed(self, loop: str, exc: BaseException, in_a_row: int) -> None:
        """Count and log one failed round, then wait out its back-off."""
        self.counter.labels(loop).inc()
        failure = classify(exc)
        log.error(
            "round failed; trying again",
            extra={"loop": loop, "error": type(exc).__name__, "reason": failure.reason.value},
        )
        unit = self.rng.random()
        await self.sleep(self.backoff.round_delay_s(in_a_row, unit, failure.retry_after_s))


async def guarded_rounds(
    loop: str, failures: RoundFailures, round_: Callable[[], Awaitable[None]]
) -> None:
    """Run ``round_`` once; a failure (never a `StartupError`) is counted and waited out."""
    in_a_row = 0
    while True:
        try:
            await round_()
            return
        except StartupError:
            raise
        except Exception as exc:
            in_a_row += 1
            await failures.failed(loop, exc, in_a_row)


TaskFactory = Callable[[], Coroutine[Any, Any, None]]


class Supervisor:
    """Runs named tasks; restarts a failed one, returns at a stop, a deliberate exit, or a
    task that ended by itself."""

    def __init__(self, failures: RoundFailures) -> None:
        self.failures = failures
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._factories: dict[str, TaskFactory] = {}
        self._failed: dict[str, int] = {}

    def start(self, name: str, factory: TaskFactory) -> None:
        """Run ``factory()`` as task ``name`` (again after each failure)."""
        self._factories[name] = factory
        self.tasks[name] = asyncio.create_task(factory(), name=name)

    async def run(self, stop: asyncio.Event) -> BaseException | None:
        """Until ``stop`` is set or a task exits on purpose: the exit's error, if any."""
        stopped = asyncio.create_task(stop.wait())
        try:
            while True:
                waits: set[asyncio.Task[Any]] = {stopped, *self.tasks.values()}
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if stopped in done:
                    return None
                for task in done:
                    restarted, outcome = await self._ended(task)
                    if not restarted:
                        return outcome
        finally:
            stopped.cancel()

    async def _ended(self, task: asyncio.Task[Any]) -> tuple[bool, BaseException | None]:
        """(True, None) when the task was started again; else (False, what `run` returns)."""
        name = task.get_name()
        error = None if task.cancelled() else task.exception()
        if error is None or isinstance(error, StartupError):
            return False, error
        in_a_row = self._failed[name] = self._failed.get(name, 0) + 1
        self.failures.restarts.labels(name).inc()
        log.error("task failed; starting it again", extra={"task": name, "error": repr(error)})
        unit = self.failures.rng.random()
        await self.failures.sleep(self.failures.backoff.round_delay_s(in_a_row, unit, None))
        self.start(name, self._factories[name])
        return True, None


async def retried_at_start(
    step: Callable[[], Awaitable[T]], failures: RoundFailures, stopped: asyncio.Event
) -> T:
    """``step()`` of the operator's start, tried again with back-off while the store
    fails (an API server down or throttling, RBAC being fixed), each failure counted
    as a round failure of loop ``start``. A deliberate exit (`StartupError`) ends it,
    and so does a stop (the last failure is raised)."""
    in_a_row = 0
    while True:
        try:
            return await step()
        except StartupError:
            raise
        except WRITE_ERRORS as exc:
            if stopped.is_set():
                raise
            in_a_row += 1
            await failures.failed("start", exc, in_a_row)
