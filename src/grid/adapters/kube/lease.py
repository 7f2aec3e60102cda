"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go does it.

A candidate reads the Lease; it may take it when nobody holds it, when it holds
it already, or when the holder's record has not changed for a whole
``leaseDurationSeconds`` *as observed on this candidate's own monotonic clock*
(so clocks need not agree across nodes). Taking and renewing are PUTs with the
Lease's ``resourceVersion`` as precondition, so of two candidates racing for an
expired Lease exactly one wins and the other sees 409.

The leader renews every `LeaseSettings.retry_period_s`. Once
`LeaseSettings.renew_deadline_s` have passed since its last successful renewal
was sent, it is no longer the leader: `LeaseElector.hold` raises `LeadershipLost`.
`LeaseElector.check` (the store's write guard, run right before every attempt of
every write leaves) refuses writes half the margin earlier, even before the
renewal loop runs again (say, after the process was paused). Because the renew
deadline is shorter than the lease duration, an old leader stops writing before
any candidate may take over, with time to spare for a write already past the
guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grid.adapters.kube.client import KubeClient, api_path
from grid.errors import Conflict, GridError, NotFound

log = logging.getLogger("grid.leader")

LEASE_API = "coordination.k8s.io/v1"


@dataclass(frozen=True)
class LeaseSettings:
    """Timing of leader election (the client-go defaults)."""

    lease_duration_s: float = 15.0
    """How long a candidate waits, after it last saw the Lease change, before it
    may take it over. Longer survives longer API hiccups; shorter fails over sooner."""
    renew_deadline_s: float = 10.0
    """How long a leader keeps leading without a successful renewal. Must be shorter
    than the lease duration: the gap is the margin for the old leader to stop."""
    retry_period_s: float = 2.0
    """Seconds between renewals, and between a follower's attempts to take over."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise GridError(
                "leader election needs retry period < renew deadline < lease duration",
                code="invalid",
            )


class LeadershipLost(GridError):
    """This replica is no longer the leader; it must stop and restart as a follower."""

    code = "leadership_lost"


def _micro_time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """One candidate for one Lease."""

    def __init__(
        self,
        client: KubeClient,
        name: str,
        namespace: str,
        identity: str,
        settings: LeaseSettings | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.name, self.namespace, self.identity = name, namespace, identity
        self.settings = settings or LeaseSettings()
        self._mono = monotonic
        self._path = api_path(LEASE_API, "leases", namespace, name)
        self._observed: tuple[Any, float] | None = None
        self._renewed_at: float | None = None
        """Monotonic time the last successful take/renew request was sent."""
        self.renewal_failed: Callable[[BaseException], None] | None = None
        """Called with each renewal that failed (the operator counts it); `hold`
        tries again every retry period until the renew deadline."""

    @property
    def is_leader(self) -> bool:
        """Whether this replica leads now: its last renewal is within the renew deadline."""
        if self._renewed_at is None:
            return False
        return self._mono() - self._renewed_at < self.settings.renew_deadline_s

    @property
    def write_deadline_s(self) -> float:
        """How long after its last renewal a leader may still start a write.

        Half the margin between the renew deadline and the lease duration earlier
        than the renew deadline: a write that passes the guard then has the other
        half to reach the API server before any candidate may take the Lease over,
        however the event loop is delayed between the check and the send.
        """
        margin = self.settings.lease_duration_s - self.settings.renew_deadline_s
        return self.settings.renew_deadline_s - margin / 2

    def check(self) -> None:
        """Raise `LeadershipLost` unless this replica may write now (the store's write guard)."""
        renewed = self._renewed_at
        if renewed is None or self._mono() - renewed >= self.write_deadline_s:
            raise LeadershipLost(f"not the leader of Lease {self.namespace}/{self.name}")

    def _spec(self, current: dict[str, Any] | None) -> dict[str, Any]:
        now = _micro_time(dt.datetime.now(dt.UTC))
        spec = dict(current or {})
        transitions = int(spec.get("leaseTransitions") or 0)
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
            if current is not None:
                transitions += 1
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=max(1, round(self.settings.lease_duration_s)),
            renewTime=now,
            leaseTransitions=transitions,
        )
        return spec

    async def try_acquire_or_renew(self) -> bool:
        """One attempt to take or renew the Lease; True when this replica now holds it."""
        sent = self._mono()
        what = f"Lease {self.namespace}/{self.name}"
        try:
            lease = await self.client.request("GET", self._path, what=what)
        except NotFound:
            body = {
                "apiVersion": LEASE_API,
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(None),
            }
            collection = api_path(LEASE_API, "leases", self.namespace)
            try:
                await self.client.request("POST", collection, what=what, body=body)
            except GridError as exc:
                log.info("lease not created", extra={"code": exc.code})
                return False
            self._renewed_at = sent
            return True
        spec = lease.get("spec") or {}
        if self._observed is None or self._observed[0] != spec:
            self._observed = (spec, sent)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.settings.lease_duration_s)
        if holder not in ("", self.identity) and sent < self._observed[1] + duration:
            return False
        lease["spec"] = self._spec(spec)
        lease["metadata"].pop("managedFields", None)
        try:
            await self.client.request("PUT", self._path, what=what, body=lease)
        except Conflict:
            return False
        self._renewed_at = sent
        return True

    async def acquire(self) -> None:
        """Wait until this replica holds the Lease."""
        while True:
            with contextlib.suppress(GridError):
                if await self.try_acquire_or_renew():
                    log.info("became leader", extra={"lease": self.name, "identity": self.identity})
                    return
            await asyncio.sleep(self.settings.retry_period_s)

    def _held_by_another(self) -> bool:
        """Whether the Lease last read names another holder."""
        if self._observed is None:
            return False
        return (self._observed[0].get("holderIdentity") or "") not in ("", self.identity)

    async def hold(self) -> None:
        """Renew until leadership is lost, then raise `LeadershipLost`; never returns."""
        while True:
            await asyncio.sleep(self.settings.retry_period_s)
            if not self.is_leader:
                break
            assert self._renewed_at is not None
            left = self.settings.renew_deadline_s - (self._mono() - self._renewed_at)
            try:
                async with asyncio.timeout(max(0.0, left)):
                    renewed = await self.try_acquire_or_renew()
            except (GridError, TimeoutError) as exc:
                log.warning("lease renewal failed", extra={"reason": type(exc).__name__})
                if self.renewal_failed is not None:
                    self.renewal_failed(exc)
                continue
            if not renewed and self._held_by_another():
                self._renewed_at = None
                break
            # Not renewed but still ours (a 409 from a concurrent write): try again
            # until the renew deadline, as client-go's renew loop does.
        self._renewed_at = None
        log.error("lost leadership", extra={"lease": self.name, "identity": self.identity})
        raise LeadershipLost(f"lost Lease {self.namespace}/{self.name}")

    async def release(self) -> None:
        """Give the Lease up at a graceful stop, so a follower need not wait it out."""
        if not self.is_leader:
            return
        self._renewed_at = None
        what = f"Lease {self.namespace}/{self.name}"
        with contextlib.suppress(GridError):
            lease = await self.client.request("GET", self._path, what=what)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"].update(holderIdentity="", leaseDurationSeconds=1)
            lease["metadata"].pop("managedFields", None)
            await self.client.request("PUT", self._path, what=what, body=lease)
