"""The seed-004 admission pipeline as a pure decision sequence.

The gateway's handler does the I/O (TLS, reading the body, publishing) and asks
this object to decide at each step, in seed order exactly:

1. `identify`: the agent ID from the verified leaf (SPIFFE URI SAN, else CN);
2. `admit` (roster): unknown agents have no tenant and are refused;
3. `admit` (rate, then capacity): one token from the agent's single bucket,
   then a reservation of body bytes and a request slot, before any body byte
   is read;
4. `check_content`: a Protobuf content type, and a declared length within the
   body limit (the adapter then reads at most that limit);
5. `accept`: decode, versions, record count, stamp, validate every record;
6. (adapter) publish within the budget; only a durable receipt is an ACK.

Every refusal is raised as a `TelemetryRefusal`; a batch is accepted whole or
refused whole. The object keeps state (roster, buckets, capacity) but never
reads a clock: ``now`` comes in from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

from grid.core.telemetry.bucket import AgentBuckets
from grid.core.telemetry.capacity import CapacityLedger, Reservation
from grid.core.telemetry.columns import stamp_clearly_valid
from grid.core.telemetry.refusals import (
    AgentNotRegistered,
    BatchBodyTooLarge,
    RateLimited,
    UnsupportedContentType,
)
from grid.core.telemetry.roster import Roster
from grid.core.telemetry.settings import GatewaySettings
from grid.core.telemetry.stamping import (
    ReceptionStamp,
    batch_id_for,
    encoded_stamp,
    stamp_records,
)
from grid.core.telemetry.validation import (
    ObservedWindow,
    Route,
    batch_records,
    check_record_count,
    check_versions,
    decode_batch,
    split_stamped,
    validate_records,
)

PROTOBUF_CONTENT_TYPE = "application/x-protobuf"


@dataclass(frozen=True)
class Ticket:
    """An agent admitted through steps 1-3, holding a capacity reservation."""

    agent_id: str
    tenant_id: str
    route: Route
    reservation: Reservation


@dataclass(frozen=True)
class StampedBatch:
    """A validated, stamped batch ready for durable publication, serialized once."""

    batch_id: str
    route: Route
    stamped: bytes
    """The stamped ``EventBatch`` or ``InventoryBatch``, encoded once for the whole batch."""
    accepted: int
    """How many records the batch holds."""

    @property
    def records(self) -> list[tuple[str, bytes]]:
        """``(record_id, encoded stamped record)`` in batch order, decoded on demand."""
        return split_stamped(self.route, self.stamped)


class Admission:
    """Roster, per-agent buckets and aggregate capacity, applied in seed order."""

    def __init__(self, settings: GatewaySettings, roster: Roster | None = None) -> None:
        self.settings = settings
        self.roster = roster if roster is not None else Roster()
        self.buckets = AgentBuckets(settings.rate_per_agent_rps, settings.burst_per_agent)
        self.capacity = CapacityLedger(
            settings.held_body_bytes_max,
            settings.requests_in_flight_max,
            settings.capacity_retry_after_s,
        )

    @staticmethod
    def identify(identity: str | None) -> str:
        """Step 1: a certificate without a single identity cannot be in the roster."""
        if not identity:
            raise AgentNotRegistered("the client certificate names no single identity")
        return identity

    def admit(self, agent_id: str, route: Route, content_length: int | None, now: float) -> Ticket:
        """Steps 2 and 3: roster, then one rate token, then the capacity reservation."""
        tenant_id = self.roster.admit(agent_id)
        wait_s = self.buckets.take(agent_id, now)
        if wait_s > 0:
            raise RateLimited(
                f"agent {agent_id!r} exceeded {self.settings.rate_per_agent_rps:g} requests/s",
                retry_after_s=wait_s,
            )
        reservation = self.capacity.reserve(content_length, self.settings.request_body_bytes_max)
        return Ticket(agent_id, tenant_id, route, reservation)

    def release(self, ticket: Ticket) -> None:
        """Return a ticket's capacity once its response is decided."""
        self.capacity.release(ticket.reservation)

    def check_content(self, content_type: str, content_length: int | None) -> None:
        """Step 4, before reading: a Protobuf body whose declared size is within the limit."""
        media_type = content_type.split(";", 1)[0].strip().lower()
        if media_type != PROTOBUF_CONTENT_TYPE:
            raise UnsupportedContentType(
                f"content type {media_type or '(none)'!r} is not {PROTOBUF_CONTENT_TYPE}"
            )
        if content_length is not None and content_length > self.settings.request_body_bytes_max:
            raise self.body_too_large()

    def body_too_large(self) -> BatchBodyTooLarge:
        """The refusal for a body past the request limit (declared or as read)."""
        return BatchBodyTooLarge(
            f"request body exceeds {self.settings.request_body_bytes_max} bytes"
        )

    def accept(self, ticket: Ticket, body: bytes, reception: ReceptionStamp) -> StampedBatch:
        """Step 5: decode, check versions and count, validate and stamp every record.

        The whole batch is encoded once, stamped: backbones store it as one unit.
        """
        batch = decode_batch(ticket.route, body)
        # Fields this schema does not know are dropped before stamping, at every level:
        # a published record holds only what the contract names (SPEC-DECISIONS §8).
        batch.DiscardUnknownFields()
        check_versions(batch)
        records = batch_records(batch)
        check_record_count(ticket.route, len(records), self.settings)
        window = ObservedWindow.around(reception.received_at_ns, self.settings)
        stamp = encoded_stamp(ticket.agent_id, ticket.tenant_id, reception)
        stamped = stamp_clearly_valid(batch, window, self.settings, stamp)
        if stamped is None:
            # The exact path: names the first invalid record, or stamps record by record.
            validate_records(records, window, self.settings)
            stamp_records(records, ticket.agent_id, ticket.tenant_id, reception)
            stamped = batch.SerializeToString(deterministic=True)
        batch_id = batch_id_for(ticket.route, ticket.agent_id, body)
        return StampedBatch(batch_id, ticket.route, stamped, len(records))
