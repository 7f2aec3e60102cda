"""Seed 004 step 5, second half: stamp authoritative identity and reception.

``origin.agent_id`` comes from the TLS leaf, ``origin.tenant_id`` from the
roster, and ``reception`` from the gateway. Whatever the client put in those
fields is replaced, never merged. ``observed_at`` is left exactly as sent.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from grid.core.telemetry.validation import NANOS, AnyRecord, Route


@dataclass(frozen=True)
class ReceptionStamp:
    """The gateway's reception metadata for one request."""

    gateway_id: str
    received_at_ns: int
    request_id: str


def stamp_record(
    record: AnyRecord, agent_id: str, tenant_id: str, reception: ReceptionStamp
) -> None:
    """Overwrite ``origin`` and ``reception`` of a decoded record in place."""
    record.ClearField("origin")
    record.origin.agent_id = agent_id
    record.origin.tenant_id = tenant_id
    record.ClearField("reception")
    record.reception.gateway_id = reception.gateway_id
    record.reception.request_id = reception.request_id
    seconds, nanos = divmod(reception.received_at_ns, NANOS)
    record.reception.received_at.seconds = seconds
    record.reception.received_at.nanos = nanos


def batch_id_for(route: Route, agent_id: str, body: bytes) -> str:
    """A batch ID derived from the route, the agent and the exact request bytes.

    A byte-identical retry of the same batch by the same agent maps to the same
    ID, so backbones that de-duplicate on it (JetStream's ``Nats-Msg-Id``, the
    SQLite backbone's unique batch ID) store it once.
    """
    digest = hashlib.sha256()
    for part in (route.encode(), agent_id.encode("utf-8"), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:32]
