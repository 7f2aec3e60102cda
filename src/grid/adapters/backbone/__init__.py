"""Durable backbones for the telemetry admission gateway, behind the `Backbone` port.

An ACK from the gateway means the batch survives ``kill -9`` of the gateway:
`Backbone.publish` returns a `Receipt` only once the backbone has made the batch
durable, and raises `BackboneUnavailable` when it cannot say so. Implementations:
``sqlite`` (the embedded default: WAL, ``synchronous=FULL``) and ``jetstream``
(NATS JetStream with file storage, publish-ack awaited).

The roster of agents is an append-only log with the same two homes, behind the
`RosterLog` port: replayed in full before the listener opens, then tailed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from google.protobuf.message import DecodeError

# One type for "no durable receipt": the refusal the gateway answers with (a 503).
from grid.core.telemetry.refusals import BackboneUnavailable as BackboneUnavailable
from grid.core.telemetry.validation import split_stamped
from grid.errors import ProtocolError

Route = Literal["events", "inventory"]
RosterState = Literal["registered", "admitted", "suspended", "revoked"]


@dataclass(frozen=True)
class StoredRecord:
    """One stamped record as published: its identity plus the encoded record bytes."""

    record_id: str
    encoded: bytes


def stored_records(route: Route, stamped: bytes) -> list[StoredRecord]:
    """The records of a stamped batch as stored, decoded one by one (the read path).

    Raises `ProtocolError` (code ``bad_frame``) when the bytes are not a batch.
    """
    try:
        return [StoredRecord(rid, encoded) for rid, encoded in split_stamped(route, stamped)]
    except DecodeError as exc:
        raise ProtocolError(f"stored {route} batch does not decode", code="bad_frame") from exc


@dataclass(frozen=True)
class PublishBatch:
    """A whole validated, stamped batch: accepted whole or refused whole.

    ``stamped`` is the stamped ``EventBatch`` or ``InventoryBatch`` encoded once;
    backbones store exactly these bytes as one unit. ``records`` decodes them,
    for readers and tests; the ingest path never needs it.
    """

    batch_id: str
    route: Route
    stamped: bytes
    accepted: int

    @property
    def records(self) -> Sequence[StoredRecord]:
        """The batch's records, decoded from ``stamped``."""
        return stored_records(self.route, self.stamped)


@dataclass(frozen=True)
class Receipt:
    """Proof of durable publication of one batch."""

    batch_id: str
    accepted: int
    duplicate: bool = False


class Backbone(Protocol):
    """Where acknowledged batches live."""

    async def publish(self, batch: PublishBatch) -> Receipt:
        """Make ``batch`` durable, or raise `BackboneUnavailable`."""
        ...

    def records(self) -> AsyncIterator[tuple[str, Route, StoredRecord]]:
        """Every durably published record as ``(batch_id, route, record)``, in order."""
        ...

    async def close(self) -> None:
        """Release connections and threads."""
        ...


@dataclass(frozen=True)
class RosterEntry:
    """One append to the roster log."""

    agent_id: str
    tenant_id: str | None
    state: RosterState
    revision: int


class RosterLog(Protocol):
    """The append-only roster of agents."""

    async def append(self, agent_id: str, state: RosterState, tenant_id: str | None) -> RosterEntry:
        """Append a state change; the log assigns the next revision."""
        ...

    async def replay(self) -> list[RosterEntry]:
        """Every entry so far, in revision order."""
        ...

    def tail(self, after_revision: int) -> AsyncIterator[RosterEntry]:
        """Entries newer than ``after_revision`` as they are appended (runs until cancelled)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
