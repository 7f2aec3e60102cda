"""Seed 004 step 5, first half: decode the batch, check versions, validate records.

The body is untrusted bytes. Decoding has exactly two outcomes: a batch, or a
refusal with a stable code (``invalid_batch`` for bytes that do not decode,
``unsupported_protocol_version`` for a protocol or schema version other than 1,
``batch_body_too_large`` for more records than the route allows). Every record
is then validated; the first invalid one refuses the whole batch and its index
is in the message. Producer timestamps are observations: one outside the
skew/age policy is refused, never rewritten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from google.protobuf.message import DecodeError

from grid.core.telemetry.refusals import (
    BatchBodyTooLarge,
    InvalidBatch,
    UnsupportedProtocolVersion,
)
from grid.core.telemetry.settings import GatewaySettings
from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import (
    Event,
    EventBatch,
    InventoryBatch,
    InventoryRecord,
)

Route = Literal["events", "inventory"]
AnyBatch = EventBatch | InventoryBatch
AnyRecord = Event | InventoryRecord

SUPPORTED_PROTOCOL_VERSIONS = frozenset({1})
SUPPORTED_SCHEMA_VERSIONS = frozenset({1})
NANOS = 1_000_000_000
# google.protobuf.Timestamp's valid range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
TIMESTAMP_SECONDS_MIN = -62_135_596_800
TIMESTAMP_SECONDS_MAX = 253_402_300_799


def decode_batch(route: Route, body: bytes) -> AnyBatch:
    """Decode a request body into the route's batch message, or raise `InvalidBatch`."""
    batch: AnyBatch = EventBatch() if route == "events" else InventoryBatch()
    try:
        batch.ParseFromString(body)
    except DecodeError as exc:
        raise InvalidBatch(f"body does not decode as {type(batch).__name__}") from exc
    except Exception as exc:
        # The upb decoder signals some malformed inputs (nesting depth, for
        # example) with other exception types; untrusted bytes must still end
        # in exactly one refusal code.
        raise InvalidBatch(f"body does not decode as {type(batch).__name__}") from exc
    return batch


def batch_records(batch: AnyBatch) -> Sequence[AnyRecord]:
    """The records of either batch type, in order (the batch's own repeated field)."""
    if isinstance(batch, EventBatch):
        return batch.events
    return batch.records


def split_stamped(route: Route, stamped: bytes) -> list[tuple[str, bytes]]:
    """``(record_id, encoded record)`` of every record of a stamped batch, in order.

    The read-time view of what the gateway published: backbones store the stamped
    batch as one unit and audits decode it record by record.
    """
    batch = EventBatch() if route == "events" else InventoryBatch()
    batch.ParseFromString(stamped)
    return [
        (record.record_id, record.SerializeToString(deterministic=True))
        for record in batch_records(batch)
    ]


def check_versions(batch: AnyBatch) -> None:
    """Refuse protocol and schema versions this gateway does not speak."""
    if batch.protocol_version not in SUPPORTED_PROTOCOL_VERSIONS:
        raise UnsupportedProtocolVersion(
            f"protocol_version {batch.protocol_version} is not supported (supported: 1)"
        )
    if batch.schema_version not in SUPPORTED_SCHEMA_VERSIONS:
        raise UnsupportedProtocolVersion(
            f"schema_version {batch.schema_version} is not supported (supported: 1)"
        )


def check_record_count(route: Route, count: int, settings: GatewaySettings) -> None:
    """Refuse an empty batch, or one with more records than the route allows."""
    limit = settings.batch_records_max(route)
    if count > limit:
        raise BatchBodyTooLarge(f"{count} records exceed the {route} batch limit of {limit}")
    if count == 0:
        raise InvalidBatch("batch holds no records")


@dataclass(frozen=True)
class ObservedWindow:
    """One request's skew/age bounds on ``observed_at``, computed once per request.

    ``seconds_min``/``seconds_max`` bound whole seconds such that any valid
    Timestamp with those seconds (nanos in ``[0, 1e9)``) lies inside the policy:
    a record passing them needs no further timestamp arithmetic.
    """

    received_at_ns: int
    seconds_min: int
    seconds_max: int

    @classmethod
    def around(cls, received_at_ns: int, settings: GatewaySettings) -> ObservedWindow:
        """The window of a request received at ``received_at_ns``."""
        low_ns = received_at_ns - int(settings.observed_age_max_s * NANOS)
        high_ns = received_at_ns + int(settings.observed_ahead_max_s * NANOS)
        return cls(
            received_at_ns,
            max(-(-low_ns // NANOS), TIMESTAMP_SECONDS_MIN),
            min((high_ns - (NANOS - 1)) // NANOS, TIMESTAMP_SECONDS_MAX),
        )


def validate_records(
    records: Sequence[AnyRecord], window: ObservedWindow, settings: GatewaySettings
) -> None:
    """Validate every record; raise `InvalidBatch` naming the first invalid one.

    Record by record: the exact rules. `grid.core.telemetry.columns` decides
    clearly valid batches without this loop.
    """
    seen: set[str] = set()
    for index, record in enumerate(records):
        validate_record(index, record, window.received_at_ns, settings, seen)


def validate_record(
    index: int,
    record: AnyRecord,
    received_at_ns: int,
    settings: GatewaySettings,
    seen_ids: set[str],
) -> None:
    """Validate one record against the settings; raise `InvalidBatch` naming its index."""
    problem = _record_problem(record, received_at_ns, settings, seen_ids)
    if problem is not None:
        raise InvalidBatch(f"record {index}: {problem}")
    seen_ids.add(record.record_id)


def _record_problem(
    record: AnyRecord, received_at_ns: int, settings: GatewaySettings, seen_ids: set[str]
) -> str | None:
    if not record.record_id:
        return "record_id is empty"
    if len(record.record_id) > settings.record_id_chars_max:
        return f"record_id longer than {settings.record_id_chars_max} characters"
    if record.record_id in seen_ids:
        return "record_id repeats an earlier record in the batch"
    if not record.type:
        return "type is empty"
    if len(record.type) > settings.type_chars_max:
        return f"type longer than {settings.type_chars_max} characters"
    attributes_problem = _attributes_problem(record, settings)
    if attributes_problem is not None:
        return attributes_problem
    return observed_at_problem(record, received_at_ns, settings)


def _attributes_problem(record: AnyRecord, settings: GatewaySettings) -> str | None:
    attributes = record.attributes
    if len(attributes) > settings.attributes_max:
        return f"more than {settings.attributes_max} attributes"
    if all(_attribute_problem(k, v, settings) is None for k, v in attributes.items()):
        return None
    # A map iterates in the runtime's hash order, which is seeded per process and
    # differs between a message and its re-decoded copy: with two bad attributes,
    # the refusal would name either. It names the first in key order instead, so
    # the same batch gets the same message on every path, gateway and retry.
    problems = (_attribute_problem(k, v, settings) for k, v in sorted(attributes.items()))
    return next(problem for problem in problems if problem is not None)


def _attribute_problem(key: str, value: str, settings: GatewaySettings) -> str | None:
    if not key or len(key) > settings.attribute_key_chars_max:
        return f"attribute key must be 1 to {settings.attribute_key_chars_max} characters"
    if len(value) > settings.attribute_value_chars_max:
        return f"attribute {key!r} longer than {settings.attribute_value_chars_max} characters"
    return None


def observed_at_problem(
    record: AnyRecord, received_at_ns: int, settings: GatewaySettings
) -> str | None:
    """Why ``observed_at`` is outside the skew/age policy, or None when it is within."""
    if not record.HasField("observed_at"):
        return "observed_at is missing"
    ts = record.observed_at
    if not 0 <= ts.nanos < NANOS or not (
        TIMESTAMP_SECONDS_MIN <= ts.seconds <= TIMESTAMP_SECONDS_MAX
    ):
        return "observed_at is not a valid timestamp"
    observed_ns = ts.seconds * NANOS + ts.nanos
    ahead_ns = int(settings.observed_ahead_max_s * NANOS)
    age_ns = int(settings.observed_age_max_s * NANOS)
    if observed_ns > received_at_ns + ahead_ns:
        return (
            f"observed_at is more than {settings.observed_ahead_max_s:g} s ahead of the gateway "
            "clock (refused, not retimestamped)"
        )
    if observed_ns < received_at_ns - age_ns:
        return (
            f"observed_at is more than {settings.observed_age_max_s:g} s old "
            "(refused, not retimestamped)"
        )
    return None
