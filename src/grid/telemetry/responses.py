"""HTTP answers of the telemetry gateway: the Ack, and refusals as Protobuf or JSON.

A refusal carries a Protobuf ``Refusal {code, message, retry_after_seconds}``,
or the same three fields as JSON when the client sends ``Accept:
application/json``. Refusals that pace the client (429, 503) carry a
``Retry-After`` header in whole seconds. Every answer echoes the gateway's
request ID in ``X-Request-Id``.
"""

from __future__ import annotations

import json

from aiohttp import web

from grid.core.telemetry.admission import PROTOBUF_CONTENT_TYPE
from grid.core.telemetry.refusals import TelemetryRefusal
from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import Ack, Refusal

REQUEST_ID_HEADER = "X-Request-Id"
JSON_CONTENT_TYPE = "application/json"


def wants_json(accept: str) -> bool:
    """True when the Accept header asks for JSON."""
    return any(
        part.split(";", 1)[0].strip().lower() == JSON_CONTENT_TYPE for part in accept.split(",")
    )


def refusal_response(refusal: TelemetryRefusal, request_id: str, accept: str) -> web.Response:
    """The HTTP answer for one refusal."""
    headers = {REQUEST_ID_HEADER: request_id}
    retry = refusal.retry_after_seconds
    if refusal.retry_after_s is not None:
        headers["Retry-After"] = str(retry)
    if wants_json(accept):
        body = json.dumps(
            {"code": refusal.code, "message": refusal.message, "retry_after_seconds": retry}
        ).encode()
        content_type = JSON_CONTENT_TYPE
    else:
        message = Refusal(code=refusal.code, message=refusal.message, retry_after_seconds=retry)
        body = message.SerializeToString()
        content_type = PROTOBUF_CONTENT_TYPE
    return web.Response(
        status=refusal.status, body=body, content_type=content_type, headers=headers
    )


def ack_response(batch_id: str, accepted: int, request_id: str) -> web.Response:
    """200 with a Protobuf ``Ack``: sent only after durable publication."""
    body = Ack(batch_id=batch_id, accepted=accepted).SerializeToString()
    return web.Response(
        status=200,
        body=body,
        content_type=PROTOBUF_CONTENT_TYPE,
        headers={REQUEST_ID_HEADER: request_id},
    )
