"""Seed 004 step 5, second half: stamp authoritative identity and reception.

``origin.agent_id`` comes from the TLS leaf, ``origin.tenant_id`` from the
roster, and ``reception`` from the gateway. Whatever the client put in those
fields is replaced, never merged. ``observed_at`` is left exactly as sent.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter, methodcaller

from grid.core.telemetry.validation import NANOS, AnyRecord, Route
from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import Event, Origin, Reception

_ORIGIN = attrgetter("origin")
_RECEPTION = attrgetter("reception")


@dataclass(frozen=True)
class ReceptionStamp:
    """The gateway's reception metadata for one request."""

    gateway_id: str
    received_at_ns: int
    request_id: str


def stamp_records(
    records: Sequence[AnyRecord], agent_id: str, tenant_id: str, reception: ReceptionStamp
) -> None:
    """Overwrite ``origin`` and ``reception`` of every decoded record in place.

    One C-level pass per field, without a Python frame per record. ``CopyFrom``
    clears the target first, so nothing of what the client sent in ``origin`` or
    ``reception`` (unknown fields included) survives.
    """
    stamp = _stamp(agent_id, tenant_id, reception)
    deque(map(methodcaller("CopyFrom", stamp.origin), map(_ORIGIN, records)), maxlen=0)
    deque(map(methodcaller("CopyFrom", stamp.reception), map(_RECEPTION, records)), maxlen=0)


def encoded_stamp(agent_id: str, tenant_id: str, reception: ReceptionStamp) -> bytes:
    """The encoded ``origin`` and ``reception`` fields, as appended to a record's bytes.

    A record that has neither field, followed by these bytes, decodes exactly as
    the record `stamp_records` produces.
    """
    return _stamp(agent_id, tenant_id, reception).SerializeToString(deterministic=True)


def _stamp(agent_id: str, tenant_id: str, reception: ReceptionStamp) -> Event:
    """An Event holding only the authoritative ``origin`` and ``reception``."""
    stamp = Event(
        origin=Origin(agent_id=agent_id, tenant_id=tenant_id),
        reception=Reception(gateway_id=reception.gateway_id, request_id=reception.request_id),
    )
    received_at = stamp.reception.received_at
    received_at.seconds, received_at.nanos = divmod(reception.received_at_ns, NANOS)
    return stamp


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
