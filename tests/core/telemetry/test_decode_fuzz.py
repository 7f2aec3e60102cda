"""Untrusted bodies have exactly two outcomes: a stamped batch or a telemetry refusal."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.telemetry.admission import Admission, Ticket
from grid.core.telemetry.capacity import Reservation
from grid.core.telemetry.refusals import TelemetryRefusal
from grid.core.telemetry.settings import GatewaySettings
from grid.core.telemetry.stamping import ReceptionStamp

from .conftest import NOW_NS, event_batch

ADMISSION = Admission(GatewaySettings())
RECEPTION = ReceptionStamp("gw", NOW_NS, "req")
VALID = event_batch(3).SerializeToString()


def _outcome(route: str, body: bytes) -> None:
    ticket = Ticket("agent", "tenant", route, Reservation(len(body)))  # type: ignore[arg-type]
    try:
        stamped = ADMISSION.accept(ticket, body, RECEPTION)
    except TelemetryRefusal:
        return
    assert stamped.records and len(stamped.batch_id) == 32


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["events", "inventory"]), st.binary(max_size=512))
def test_random_bytes_decode_or_refuse(route: str, body: bytes) -> None:
    _outcome(route, body)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(VALID) - 1), st.integers(0, 255), st.integers(0, len(VALID)))
def test_mutated_valid_batches_decode_or_refuse(position: int, byte: int, cut: int) -> None:
    mutated = bytearray(VALID)
    mutated[position] = byte
    _outcome("events", bytes(mutated[:cut]) + bytes(mutated[cut:]))
    _outcome("events", bytes(mutated[:cut]))
