"""The refusal codes of the telemetry admission gateway (seed 004, SPEC-DECISIONS §8).

Each refusal code is one class carrying its wire ``code`` and HTTP ``status``.
Codes that ask the client to pace itself carry ``retry_after_s``, which the
gateway turns into a ``Retry-After`` header and the ``retry_after_seconds``
field of the Protobuf ``Refusal``. A refusal never acknowledges any part of a
batch: a batch is accepted whole or refused whole.
"""

from __future__ import annotations

import enum
import math

from grid.errors import ProtocolError, Refusal


class Remedy(enum.StrEnum):
    """What a retaining client does after a refusal (seed 004's "Refusal and retry" table).

    The gateway and the client read the same table: each refusal class below names its
    remedy, so a new code cannot be handled by one side and forgotten by the other.
    """

    RETRY = "retry"
    """Retain the batch and send it again later, no sooner than ``retry_after_seconds``."""
    SPLIT = "split"
    """Split the batch in two and send each half (the body or record count was too large)."""
    STOP = "stop"
    """No batch can succeed until an operator acts: stop sending and retain everything."""
    RETAIN = "retain"
    """Retain this batch (it cannot succeed as sent) and go on with the next."""


class TelemetryRefusal(Refusal):
    """Base of every telemetry admission refusal."""

    code = "telemetry_refusal"
    status = 400
    remedy = Remedy.RETAIN

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    @property
    def retry_after_seconds(self) -> int:
        """The retry pace in whole seconds (rounded up, at least 1), or 0 when none applies."""
        if self.retry_after_s is None:
            return 0
        return max(1, math.ceil(self.retry_after_s))


class AgentNotRegistered(TelemetryRefusal):
    """The roster holds no entry for the certificate's identity, so it has no tenant."""

    code = "agent_not_registered"
    status = 403
    remedy = Remedy.STOP


class AgentNotAdmitted(TelemetryRefusal):
    """The agent is registered but not admissible (registered, suspended or revoked)."""

    code = "agent_not_admitted"
    status = 403
    remedy = Remedy.STOP


class RateLimited(TelemetryRefusal):
    """The agent's token bucket is empty; retry after the given pace."""

    code = "rate_limited"
    status = 429
    remedy = Remedy.RETRY


class GatewayAtCapacity(TelemetryRefusal):
    """The aggregate held-body or request-count bound is reached; retain and back off."""

    code = "gateway_at_capacity"
    status = 503
    remedy = Remedy.RETRY


class UnsupportedProtocolVersion(TelemetryRefusal, ProtocolError):
    """The batch names a protocol_version or schema_version this gateway does not speak."""

    code = "unsupported_protocol_version"
    status = 400
    remedy = Remedy.STOP


class UnsupportedContentType(TelemetryRefusal):
    """The request is not ``application/x-protobuf``."""

    code = "unsupported_content_type"
    status = 415
    remedy = Remedy.RETAIN


class BatchBodyTooLarge(TelemetryRefusal):
    """The body exceeds the request limit, or the batch holds too many records."""

    code = "batch_body_too_large"
    status = 413
    remedy = Remedy.SPLIT


class InvalidBatch(TelemetryRefusal, ProtocolError):
    """The body does not decode, or a record is invalid; the message names the record index."""

    code = "invalid_batch"
    status = 400
    remedy = Remedy.RETAIN


class BackboneUnavailable(TelemetryRefusal):
    """No durable publication result within the budget; nothing was acknowledged."""

    code = "backbone_unavailable"
    status = 503
    remedy = Remedy.RETRY


REFUSALS: tuple[type[TelemetryRefusal], ...] = (
    AgentNotRegistered,
    AgentNotAdmitted,
    RateLimited,
    GatewayAtCapacity,
    UnsupportedProtocolVersion,
    UnsupportedContentType,
    BatchBodyTooLarge,
    InvalidBatch,
    BackboneUnavailable,
)
"""Every refusal class, in the order of SPEC-DECISIONS §8's table."""


REMEDIES: dict[str, Remedy] = {refusal.code: refusal.remedy for refusal in REFUSALS}
"""Each wire code's remedy, for a client that reads the code off the wire."""
