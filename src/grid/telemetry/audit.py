"""Audit view of published records: what `grid telemetry records -o json` prints.

Each stored record is the stamped Protobuf ``Event`` or ``InventoryRecord``;
this module decodes it back into the JSON object of SPEC-DECISIONS §9:
``batch_id``, ``record_id``, ``route``, ``origin``, ``reception`` and
``observed_at`` (timestamps in RFC 3339, UTC).
"""

from __future__ import annotations

from typing import Any

from grid.adapters.backbone import Route, StoredRecord
from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import Event, InventoryRecord


def record_json(batch_id: str, route: Route, record: StoredRecord) -> dict[str, Any]:
    """The audit object of one durably published record."""
    message = Event() if route == "events" else InventoryRecord()
    message.ParseFromString(record.encoded)
    received = message.reception.received_at
    return {
        "batch_id": batch_id,
        "record_id": record.record_id,
        "route": route,
        "origin": {
            "agent_id": message.origin.agent_id,
            "tenant_id": message.origin.tenant_id,
        },
        "reception": {
            "gateway_id": message.reception.gateway_id,
            "received_at": received.ToJsonString()
            if message.reception.HasField("received_at")
            else None,
            "request_id": message.reception.request_id,
        },
        "observed_at": message.observed_at.ToJsonString()
        if message.HasField("observed_at")
        else None,
    }
