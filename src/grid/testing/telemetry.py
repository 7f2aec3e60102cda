"""In-memory fakes of the telemetry ports: a `Backbone` and a `RosterLog`.

`MemoryBackbone` can be told to fail (``fail = True``) or to hold every publish
until a gate opens (``gate``), which is how tests show that the gateway sends no
ACK before the durable receipt. `MemoryRosterLog` wakes its tail on append, so
roster changes reach a gateway under test without polling.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from grid.adapters.backbone import (
    BackboneUnavailable,
    PublishBatch,
    Receipt,
    RosterEntry,
    RosterState,
    Route,
    StoredRecord,
)


class MemoryBackbone:
    """A `Backbone` in a list: de-duplicates batch IDs, fails or holds on demand."""

    def __init__(self) -> None:
        self.batches: list[PublishBatch] = []
        self.fail = False
        self.gate: asyncio.Event | None = None
        self.publishing = asyncio.Event()

    async def publish(self, batch: PublishBatch) -> Receipt:
        """Store ``batch`` (after the gate opens) or raise `BackboneUnavailable`."""
        self.publishing.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise BackboneUnavailable("injected failure")
        if any(b.batch_id == batch.batch_id for b in self.batches):
            return Receipt(batch.batch_id, len(batch.records), duplicate=True)
        self.batches.append(batch)
        return Receipt(batch.batch_id, len(batch.records))

    async def records(self) -> AsyncIterator[tuple[str, Route, StoredRecord]]:
        """Every stored record, in publish order."""
        for batch in self.batches:
            for record in batch.records:
                yield batch.batch_id, batch.route, record

    async def close(self) -> None:
        """Nothing to release."""


class MemoryRosterLog:
    """A `RosterLog` in a list whose tail wakes on append."""

    def __init__(self) -> None:
        self.entries: list[RosterEntry] = []
        self._changed = asyncio.Condition()

    async def append(self, agent_id: str, state: RosterState, tenant_id: str | None) -> RosterEntry:
        """Append with the next revision (1, 2, ...)."""
        entry = RosterEntry(agent_id, tenant_id, state, len(self.entries) + 1)
        async with self._changed:
            self.entries.append(entry)
            self._changed.notify_all()
        return entry

    async def replay(self) -> list[RosterEntry]:
        """Every entry so far."""
        return list(self.entries)

    async def tail(self, after_revision: int) -> AsyncIterator[RosterEntry]:
        """Entries past ``after_revision``, waking on each append; runs until cancelled."""
        last = after_revision
        while True:
            async with self._changed:
                await self._changed.wait_for(self._newer_than(last))
                new = self.entries[last:]
            for entry in new:
                last = entry.revision
                yield entry

    def _newer_than(self, revision: int) -> Callable[[], bool]:
        return lambda: len(self.entries) > revision

    async def close(self) -> None:
        """Nothing to release."""
