"""Aggregate capacity: held request-body bytes and requests in flight.

Seed 004 step 3 reserves bounded in-flight bytes and request capacity BEFORE the
body is read (step 4). The reservation is the declared Content-Length, capped at
the request body limit (no more is ever read), or the body limit itself when the
body is chunked and its size unknown. It is held until the response is sent,
because the body stays in memory until the batch is published. When either the
byte bound or the request-count bound would be exceeded the request is refused
with ``gateway_at_capacity`` and the body is never read.
"""

from __future__ import annotations

from dataclasses import dataclass

from grid.core.telemetry.refusals import GatewayAtCapacity


@dataclass(frozen=True)
class Reservation:
    """Capacity held by one request: ``body_bytes`` plus one request slot."""

    body_bytes: int


class CapacityLedger:
    """Counts reserved body bytes and requests against their bounds.

    Owned by one event-loop task at a time, so it needs no lock.
    """

    def __init__(
        self,
        held_body_bytes_max: int,
        requests_in_flight_max: int,
        retry_after_s: float = 1.0,
    ) -> None:
        self.held_body_bytes_max = held_body_bytes_max
        self.requests_in_flight_max = requests_in_flight_max
        self.retry_after_s = retry_after_s
        self.held_body_bytes = 0
        self.requests_in_flight = 0

    @staticmethod
    def reservation_bytes(content_length: int | None, body_bytes_max: int) -> int:
        """Bytes to reserve: Content-Length capped at the body limit, or the limit if unknown."""
        if content_length is None:
            return body_bytes_max
        return max(0, min(content_length, body_bytes_max))

    def reserve(self, content_length: int | None, body_bytes_max: int) -> Reservation:
        """Reserve one request slot and its body bytes, or raise `GatewayAtCapacity`."""
        size = self.reservation_bytes(content_length, body_bytes_max)
        if self.requests_in_flight >= self.requests_in_flight_max:
            raise GatewayAtCapacity(
                f"{self.requests_in_flight} requests in flight "
                f"(limit {self.requests_in_flight_max})",
                retry_after_s=self.retry_after_s,
            )
        if self.held_body_bytes + size > self.held_body_bytes_max:
            raise GatewayAtCapacity(
                f"reserving {size} body bytes would exceed the aggregate held-body limit "
                f"({self.held_body_bytes_max - self.held_body_bytes} of "
                f"{self.held_body_bytes_max} free)",
                retry_after_s=self.retry_after_s,
            )
        self.held_body_bytes += size
        self.requests_in_flight += 1
        return Reservation(size)

    def release(self, reservation: Reservation) -> None:
        """Give a reservation back (exactly once per `reserve`)."""
        self.held_body_bytes -= reservation.body_bytes
        self.requests_in_flight -= 1
        if self.held_body_bytes < 0 or self.requests_in_flight < 0:
            raise RuntimeError("capacity released more than it reserved")
