"""Every limit of the telemetry admission gateway as a named, documented setting.

The defaults are seed 004's (listener 0.0.0.0:8443, 8 MiB request body, 1,000
events, 64 inventory records, 128 MiB aggregate held body) or, where the seed is
silent, Grid's documented choices. They are configuration defaults, not capacity
claims. The same names are the keys of the gateway's config file and, with
``-`` for ``_``, its command-line flags (flags override the file).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

MIB = 1024 * 1024
_LISTEN = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^:\s\[\]]*):(\d{1,5})$")


class GatewaySettings(BaseModel):
    """The admission limits and policies, with seed 004's defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    listen: str = Field(
        "0.0.0.0:8443",
        description="HOST:PORT of the mTLS listener. Port 0 picks a free port (tests).",
    )
    gateway_id: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="Written into every record's reception.gateway_id.",
    )
    request_body_bytes_max: int = Field(
        8 * MIB,
        gt=0,
        description=(
            "Largest request body in bytes (413 batch_body_too_large above it). Bigger bodies "
            "mean fewer requests but more memory held per request."
        ),
    )
    event_batch_records_max: int = Field(
        1000,
        gt=0,
        description="Most events in one EventBatch (413 above it).",
    )
    inventory_batch_records_max: int = Field(
        64,
        gt=0,
        description="Most records in one InventoryBatch (413 above it).",
    )
    held_body_bytes_max: int = Field(
        128 * MIB,
        gt=0,
        description=(
            "Aggregate bytes of request bodies held at once across all requests, reserved "
            "before a body is read (by Content-Length, or the request limit when chunked). "
            "Bounds gateway memory; 503 gateway_at_capacity when a reservation does not fit."
        ),
    )
    requests_in_flight_max: int = Field(
        256,
        gt=0,
        description=(
            "Most admitted requests in flight at once (503 gateway_at_capacity above it). "
            "Bounds concurrent publishes and per-request bookkeeping."
        ),
    )
    rate_per_agent_rps: float = Field(
        20.0,
        gt=0,
        description=(
            "Sustained requests per second per agent, shared by /v1/events and /v1/inventory "
            "(inventory grants no second budget). 429 rate_limited beyond it."
        ),
    )
    burst_per_agent: float = Field(
        40.0,
        ge=1,
        description="Token-bucket depth per agent: requests an idle agent may send at once.",
    )
    publish_budget_s: float = Field(
        5.0,
        gt=0,
        description=(
            "Time allowed for a durable publication. Past it the request is refused with 503 "
            "backbone_unavailable and nothing is acknowledged (the batch may still land: the "
            "client's retry may then duplicate records, which record_id de-duplicates)."
        ),
    )
    body_read_budget_s: float = Field(
        30.0,
        gt=0,
        description="Time allowed to read one request body; a slower sender is cut off.",
    )
    header_read_timeout_s: float = Field(
        5.0,
        gt=0,
        description=(
            "Seconds allowed for a new connection's TLS handshake and first request head, "
            "counted from TCP accept, and for each later head, counted from its first byte. "
            "A connection that sends nothing, or only part of a head, is closed after it."
        ),
    )
    idle_timeout_s: float = Field(
        30.0,
        gt=0,
        description=(
            "Seconds a kept-alive connection may stay silent after an answer before it is "
            "closed. Longer spares agents a TLS handshake per batch; shorter frees slots sooner."
        ),
    )
    connections_max: int = Field(
        1024,
        gt=0,
        description=(
            "Most open client connections, counted from TCP accept (connections still in "
            "the TLS handshake included). A connection beyond it is aborted at accept; "
            "bounds what idle or slow clients can hold."
        ),
    )
    observed_ahead_max_s: float = Field(
        300.0,
        ge=0,
        description="How far a record's observed_at may lie ahead of the gateway clock (skew).",
    )
    observed_age_max_s: float = Field(
        7 * 24 * 3600.0,
        gt=0,
        description=(
            "How old a record's observed_at may be. Older records are refused, never retimestamped."
        ),
    )
    capacity_retry_after_s: float = Field(
        1.0,
        gt=0,
        description="Retry-After sent with 503 gateway_at_capacity.",
    )
    backbone_retry_after_s: float = Field(
        2.0,
        gt=0,
        description="Retry-After sent with 503 backbone_unavailable.",
    )
    record_id_chars_max: int = Field(
        128, gt=0, description="Longest record_id (non-empty, unique within a batch)."
    )
    type_chars_max: int = Field(128, gt=0, description="Longest record type (non-empty).")
    attributes_max: int = Field(64, ge=0, description="Most attributes on one record.")
    attribute_key_chars_max: int = Field(128, gt=0, description="Longest attribute key.")
    attribute_value_chars_max: int = Field(4096, gt=0, description="Longest attribute value.")

    @field_validator("listen")
    @classmethod
    def _listen_is_host_port(cls, value: str) -> str:
        match = _LISTEN.match(value)
        if match is None or int(match.group(2)) > 65535:
            raise ValueError("listen must be HOST:PORT (or [IPv6]:PORT) with a port up to 65535")
        return value

    def batch_records_max(self, route: str) -> int:
        """The record limit of a route (``events`` or ``inventory``)."""
        return (
            self.event_batch_records_max if route == "events" else self.inventory_batch_records_max
        )
