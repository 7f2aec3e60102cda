"""Running the operator as one of several replicas behind a Lease.

A replica starts as a follower: it serves /healthz, and /readyz answers 503 with
``role: follower`` (so a Service routes SWIM and signals only to the leader), and
binds nothing else. Once it holds the Lease it builds and runs the `Operator`
unchanged, with the store's write guard set to the elector's check, so no write
leaves a replica whose leadership has lapsed. Losing the Lease cancels the
operator at once (a graceful mesh leave could outlast the margin before the new
leader starts) and raises `LeadershipLost`, so the process exits non-zero and
restarts as a follower. A graceful stop releases the Lease for a fast handover.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid

from prometheus_client import CollectorRegistry

from grid.adapters.health_server import HealthServer
from grid.adapters.kube.lease import LeadershipLost, LeaseElector, LeaseSettings
from grid.adapters.store.kubernetes import KubernetesStore
from grid.adapters.store.url import pod_namespace
from grid.core.address import parse_address
from grid.operator.resilience import WriteSite
from grid.operator.runtime import Operator
from grid.operator.settings import OperatorSettings

log = logging.getLogger(__name__)


def replica_identity() -> str:
    """``POD_NAME`` in a cluster; elsewhere host, pid and a random suffix."""
    return os.environ.get("POD_NAME") or (
        f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    )


class ElectedOperator:
    """One replica: follower until it holds the Lease, then the operator."""

    def __init__(self, settings: OperatorSettings, store: KubernetesStore) -> None:
        self.settings = settings
        self.store = store
        self.identity = replica_identity()
        self.elector = LeaseElector(
            store.client,
            settings.lease_name or f"grid-operator-{settings.site}",
            pod_namespace(),
            self.identity,
            LeaseSettings(
                lease_duration_s=settings.lease_duration_s,
                renew_deadline_s=settings.renew_deadline_s,
                retry_period_s=settings.retry_period_s,
            ),
        )
        store.client.set_identity(self.identity)
        store.write_guard = self.elector.check
        self.operator: Operator | None = None
        self._stop = asyncio.Event()

    def stop(self) -> None:
        """Ask `run` to stop gracefully (and release the Lease when leading)."""
        self._stop.set()
        if self.operator is not None:
            self.operator.stop()

    async def _follow(self) -> bool:
        """Serve health as a follower until the Lease is ours (True) or we stop (False)."""
        follower = HealthServer(CollectorRegistry(), ready=lambda: False)
        follower.role = "follower"
        host, port = parse_address(self.settings.metrics_bind)
        await follower.start(host, port)
        log.info("following", extra={"identity": self.identity})
        try:
            acquire = asyncio.create_task(self.elector.acquire())
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait([acquire, stop], return_when=asyncio.FIRST_COMPLETED)
            for task in (acquire, stop):
                task.cancel()
            return acquire.done() and not acquire.cancelled() and not self._stop.is_set()
        finally:
            await follower.stop()

    async def run(self) -> None:
        """Follow, then lead; raises `LeadershipLost` when the Lease is lost."""
        if not await self._follow():
            await self.elector.release()
            return
        self.operator = await Operator.prepared(self.settings, self.store)
        self.operator.health.role = "leader"
        guard = self.operator.guard
        self.elector.renewal_failed = lambda exc: guard.count(WriteSite.LEASE, exc)
        if self._stop.is_set():
            self.operator.stop()
        running = asyncio.create_task(self.operator.run(), name="operator")
        holding = asyncio.create_task(self.elector.hold(), name="lease")
        await asyncio.wait([running, holding], return_when=asyncio.FIRST_COMPLETED)
        if holding.done() and not running.done():
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await running
            holding.result()  # raises LeadershipLost
            raise LeadershipLost("lost the Lease")  # hold() never returns normally
        holding.cancel()
        with contextlib.suppress(asyncio.CancelledError, LeadershipLost):
            await holding
        await self.elector.release()
        running.result()
