"""Step 5 (columns first, then record by record) agrees exactly with the per-record rules."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from grid.core.telemetry.admission import Admission
from grid.core.telemetry.refusals import InvalidBatch
from grid.core.telemetry.roster import Roster, RosterRecord
from grid.core.telemetry.settings import GatewaySettings
from grid.core.telemetry.stamping import ReceptionStamp, stamp_records
from grid.core.telemetry.validation import (
    NANOS,
    ObservedWindow,
    validate_record,
    validate_records,
)
from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import Event, EventBatch, Origin

from .conftest import NOW_NS

SETTINGS = GatewaySettings(
    record_id_chars_max=4,
    type_chars_max=3,
    attributes_max=2,
    attribute_key_chars_max=2,
    attribute_value_chars_max=3,
    observed_ahead_max_s=10,
    observed_age_max_s=20,
)
NOW_S = NOW_NS // NANOS

short_text = st.text(alphabet="ab\u00e9", max_size=5)
records = st.lists(
    st.fixed_dictionaries(
        {
            "record_id": st.sampled_from(
                ["", "r1", "r2", "r3", "r4444", "\u00e9\u00e9\u00e9\u00e9"]
            ),
            "type": short_text,
            "attributes": st.dictionaries(short_text, short_text, max_size=3),
            "observed": st.one_of(
                st.none(),
                st.tuples(st.integers(NOW_S - 25, NOW_S + 15), st.integers(0, NANOS - 1)),
            ),
        }
    ),
    min_size=1,
    max_size=5,
)


def _spec(record_id: str, type_: str, attributes: dict[str, str]) -> dict[str, object]:
    return {"record_id": record_id, "type": type_, "attributes": attributes, "observed": None}


def _batch(specs: list[dict[str, object]]) -> EventBatch:
    batch = EventBatch(protocol_version=1, schema_version=1)
    for spec in specs:
        event = batch.events.add(record_id=spec["record_id"], type=spec["type"])
        event.attributes.update(spec["attributes"])  # type: ignore[arg-type]
        if spec["observed"] is not None:
            event.observed_at.seconds, event.observed_at.nanos = spec["observed"]  # type: ignore[misc]
    return batch


def _reference(
    batch: EventBatch, received_ns: int, settings: GatewaySettings = SETTINGS
) -> str | None:
    seen: set[str] = set()
    try:
        for index, event in enumerate(batch.events):
            validate_record(index, event, received_ns, settings, seen)
    except InvalidBatch as refusal:
        return refusal.message
    return None


def _accept(
    batch: EventBatch, received_ns: int, settings: GatewaySettings = SETTINGS
) -> EventBatch:
    """Step 5 as the gateway runs it: the columnar decision, else record by record."""
    roster = Roster()
    roster.replay(
        [
            RosterRecord("agent-a", "tenant-a", "registered", 1),
            RosterRecord("agent-a", "tenant-a", "admitted", 2),
        ]
    )
    admission = Admission(settings, roster)
    ticket = admission.admit("agent-a", "events", None, 0.0)
    reception = ReceptionStamp("gw", received_ns, "req")
    stamped = admission.accept(ticket, batch.SerializeToString(), reception)
    return EventBatch.FromString(stamped.stamped)


@settings(max_examples=400, deadline=None)
@given(records, st.integers(0, NANOS - 1))
# Two bad attributes: the refusal once named either, by the map's per-process hash order.
@example([_spec("r1", "a", {"b": "aaaa", "b\u00e9aa": ""})], 0)
def test_step_5_decides_exactly_as_the_per_record_rules(
    specs: list[dict[str, object]], received_nanos: int
) -> None:
    batch = _batch(specs)
    received_ns = NOW_NS + received_nanos
    expected = _reference(batch, received_ns)
    if expected is None:
        stamped = _accept(batch, received_ns)
        assert [e.record_id for e in stamped.events] == [e.record_id for e in batch.events]
        assert {e.origin.agent_id for e in stamped.events} == {"agent-a"}
    else:
        with pytest.raises(InvalidBatch) as info:
            _accept(batch, received_ns)
        assert info.value.message == expected


def test_the_refusal_names_the_first_bad_attribute_in_key_order() -> None:
    wide = SETTINGS.model_copy(update={"attributes_max": 64})
    keys = [f"{c}{d}" for c in "pqrs" for d in "abcde"]
    batch = EventBatch(protocol_version=1, schema_version=1)
    for record_keys in (keys, keys[::-1]):
        event = batch.events.add(record_id=f"r{len(batch.events)}", type="t")
        event.attributes.update(dict.fromkeys(record_keys, "long"))
        event.observed_at.seconds = NOW_S
    reference = [_reference(EventBatch(events=[e]), NOW_NS, wide) for e in batch.events]
    assert reference == ["record 0: attribute 'pa' longer than 3 characters"] * 2
    with pytest.raises(InvalidBatch, match="record 0: attribute 'pa' longer"):
        _accept(batch, NOW_NS, wide)


@pytest.mark.parametrize("offset_ns", [-20 * NANOS, 10 * NANOS, -20 * NANOS - 1, 10 * NANOS + 1])
def test_window_edges_are_exact_to_the_nanosecond(offset_ns: int) -> None:
    batch = EventBatch()
    event = batch.events.add(record_id="r", type="t")
    event.observed_at.seconds, event.observed_at.nanos = divmod(NOW_NS + offset_ns, NANOS)
    window = ObservedWindow.around(NOW_NS, SETTINGS)
    inside = -20 * NANOS <= offset_ns <= 10 * NANOS
    if inside:
        validate_records(batch.events, window, SETTINGS)
    else:
        with pytest.raises(InvalidBatch, match="record 0: observed_at"):
            validate_records(batch.events, window, SETTINGS)


def test_unset_observed_at_is_missing_even_when_the_window_contains_the_epoch() -> None:
    wide = GatewaySettings(observed_age_max_s=NOW_S + 10)
    batch = EventBatch()
    batch.events.add(record_id="r", type="t")
    with pytest.raises(InvalidBatch, match="observed_at is missing"):
        validate_records(batch.events, ObservedWindow.around(NOW_NS, wide), wide)


def test_stamping_replaces_origin_and_reception_including_unknown_fields() -> None:
    forged = Origin(agent_id="forged", tenant_id="forged").SerializeToString() + b"\xf8\x06\x01"
    event = Event(record_id="r", type="t")
    event.reception.gateway_id = "forged-gw"
    event.reception.received_at.nanos = 7
    body = event.SerializeToString() + b"\x12" + bytes([len(forged)]) + forged
    batch = EventBatch()
    batch.events.add().ParseFromString(body)
    assert batch.events[0].origin.SerializeToString().endswith(b"\xf8\x06\x01")  # kept on parse
    stamp_records(batch.events, "agent-a", "", ReceptionStamp("gw", 5 * NANOS, "req"))
    out = Event.FromString(batch.events[0].SerializeToString())
    assert (out.origin.agent_id, out.origin.tenant_id) == ("agent-a", "")
    assert out.origin.SerializeToString() == Origin(agent_id="agent-a").SerializeToString()
    assert (out.reception.gateway_id, out.reception.request_id) == ("gw", "req")
    assert (out.reception.received_at.seconds, out.reception.received_at.nanos) == (5, 0)
    assert out.record_id == "r" and out.type == "t"
