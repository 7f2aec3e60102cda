"""The columnar step 5 decides exactly as the record-by-record path, or defers to it.

Batches are built from raw wire fragments, so a record can repeat a field (the
last occurrence wins on decode), carry client ``origin``/``reception``, unknown
fields, empty map keys, an epoch ``observed_at`` or more attributes than allowed:
the inputs on which counting columns could go wrong.
"""

from __future__ import annotations

import hypothesis
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.telemetry.columns import stamp_clearly_valid
from grid.core.telemetry.refusals import InvalidBatch
from grid.core.telemetry.settings import GatewaySettings
from grid.core.telemetry.stamping import ReceptionStamp, encoded_stamp, stamp_records
from grid.core.telemetry.validation import (
    NANOS,
    AnyBatch,
    ObservedWindow,
    batch_records,
    validate_records,
)
from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import (
    Event,
    EventBatch,
    InventoryBatch,
    InventoryRecord,
)

from .conftest import NOW_NS, event_batch, inventory_batch

SETTINGS = GatewaySettings(
    record_id_chars_max=4,
    type_chars_max=3,
    attributes_max=2,
    attribute_key_chars_max=2,
    attribute_value_chars_max=30,
    observed_ahead_max_s=10,
    observed_age_max_s=20,
)
NOW_S = NOW_NS // NANOS
RECEPTION = ReceptionStamp("gw", NOW_NS + 123, "req-1")
STAMP = encoded_stamp("agent-a", "tenant-a", RECEPTION)

short_text = st.text(alphabet="ab2\u00e9", max_size=4)


@st.composite
def fragments(draw: st.DrawFn, complete: bool = False) -> bytes:
    """One encoded Event; ``complete`` sets every field, and mostly to valid values.

    A partial fragment sets some fields (invalid values, client stamps and unknown
    fields included); appended to a record, its fields override or merge.
    """
    record = Event()
    valid = complete and draw(st.integers(0, 9)) > 0
    if valid:
        record.record_id = f"r{draw(st.integers(0, 99))}"
        record.type = draw(st.text(alphabet="ab2\u00e9", min_size=1, max_size=3))
        record.observed_at.seconds = draw(st.sampled_from([NOW_S - 5, NOW_S]))
        record.observed_at.nanos = draw(st.sampled_from([0, 1, NANOS - 1]))
        keys = st.text(alphabet="ab2", min_size=1, max_size=2)
        record.attributes.update(draw(st.dictionaries(keys, short_text, max_size=2)))
    else:
        if complete or draw(st.booleans()):
            ids = ["", "r1", "r2", "r22", "r4444", "\u00e9" * 4]
            record.record_id = draw(st.sampled_from(ids))
        if complete or draw(st.booleans()):
            record.type = draw(st.text(alphabet="ab2\u00e9", max_size=4))
        if complete or draw(st.booleans()):
            seconds = draw(st.sampled_from([NOW_S, 0, NOW_S - 25, NOW_S + 15]))
            record.observed_at.seconds = seconds
            record.observed_at.nanos = draw(st.sampled_from([0, 1, NANOS - 1]))
        keys = st.text(alphabet="ab2", max_size=3)
        record.attributes.update(draw(st.dictionaries(keys, short_text, max_size=3)))
    if draw(st.integers(0, 19)) == 0:
        record.origin.agent_id = "forged"
    if draw(st.integers(0, 19)) == 0:
        record.reception.SetInParent()
    if draw(st.booleans()):
        record.payload = draw(st.binary(max_size=40))
    unknown = b"\xf8\x06\x01" if draw(st.integers(0, 19)) == 0 else b""
    return record.SerializeToString() + unknown


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@st.composite
def wire_batches(draw: st.DrawFn) -> bytes:
    """An EventBatch body of records that are a complete fragment plus 0-2 partial ones."""
    body = bytearray(b"\x08\x01\x10\x01")
    for _ in range(draw(st.integers(1, 5))):
        parts = [draw(fragments(complete=True))]
        if draw(st.integers(0, 3)) == 0:
            parts += draw(st.lists(fragments(), min_size=1, max_size=2))
        record = b"".join(draw(st.permutations(parts)))
        body += b"\x1a" + _varint(len(record)) + record
    if draw(st.integers(0, 9)) == 0:
        body += b"\xf8\x06\x01"  # an unknown batch field
    return bytes(body)


def _exact(batch: AnyBatch) -> bytes | str:
    """The record-by-record path's outcome: the stamped batch, or the refusal message."""
    records = batch_records(batch)
    try:
        validate_records(
            records, ObservedWindow.around(RECEPTION.received_at_ns, SETTINGS), SETTINGS
        )
    except InvalidBatch as refusal:
        return refusal.message
    stamp_records(records, "agent-a", "tenant-a", RECEPTION)
    return batch.SerializeToString(deterministic=True)


def _columnar(batch: AnyBatch) -> bytes | None:
    window = ObservedWindow.around(RECEPTION.received_at_ns, SETTINGS)
    return stamp_clearly_valid(batch, window, SETTINGS, STAMP)


@settings(max_examples=600, deadline=None)
@given(wire_batches())
def test_the_columnar_path_never_accepts_what_the_exact_path_refuses(body: bytes) -> None:
    columnar = _columnar(EventBatch.FromString(body))
    exact = _exact(EventBatch.FromString(body))
    hypothesis.event("columnar" if columnar is not None else "deferred")
    hypothesis.event(f"exact: {'stamped' if isinstance(exact, bytes) else 'refused'}")
    if columnar is None:
        return  # deferred: the caller runs the exact path
    assert isinstance(exact, bytes), f"columnar accepted what the exact path refuses: {exact}"
    assert EventBatch.FromString(columnar) == EventBatch.FromString(exact)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(alphabet="ab2", min_size=1, max_size=3),
            st.dictionaries(
                st.text(alphabet="ab2", min_size=1, max_size=2), short_text, max_size=2
            ),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_plain_valid_batches_take_the_columnar_path(
    specs: list[tuple[str, dict[str, str]]],
) -> None:
    batch = EventBatch(protocol_version=1, schema_version=1)
    for n, (kind, attributes) in enumerate(specs):
        event = batch.events.add(record_id=f"r{n}", type=kind, payload=b"p" * n)
        event.observed_at.seconds, event.observed_at.nanos = NOW_S - 1, n
        event.attributes.update(attributes)
    expected = _exact(EventBatch.FromString(batch.SerializeToString()))
    assert isinstance(expected, bytes)
    columnar = _columnar(batch)
    assert columnar is not None
    assert EventBatch.FromString(columnar) == EventBatch.FromString(expected)


def test_inventory_batches_take_the_columnar_path_too() -> None:
    batch = inventory_batch(3)
    settings_ = GatewaySettings()
    window = ObservedWindow.around(NOW_NS, settings_)
    stamped = stamp_clearly_valid(batch, window, settings_, STAMP)
    assert stamped is not None
    records = InventoryBatch.FromString(stamped).records
    assert [r.record_id for r in records] == ["i0", "i1", "i2"]
    assert {(r.origin.agent_id, r.origin.tenant_id) for r in records} == {("agent-a", "tenant-a")}
    assert {r.reception.request_id for r in records} == {"req-1"}
    assert isinstance(records[0], InventoryRecord)


def test_client_stamps_and_unknown_batch_fields_defer_to_the_exact_path() -> None:
    window = ObservedWindow.around(NOW_NS, GatewaySettings())
    forged = event_batch(2)
    forged.events[1].origin.agent_id = "forged"
    assert stamp_clearly_valid(forged, window, GatewaySettings(), STAMP) is None
    extended = EventBatch.FromString(event_batch(2).SerializeToString() + b"\xf8\x06\x01")
    assert stamp_clearly_valid(extended, window, GatewaySettings(), STAMP) is None


def test_many_attributes_are_counted_per_record() -> None:
    tight = GatewaySettings(attributes_max=2)
    window = ObservedWindow.around(NOW_NS, tight)
    batch = event_batch(3)
    batch.events[2].attributes.update({"a": "1", "b": "c"})  # 3 attributes on one record
    batch.events[2].payload = b"x" * 100  # long enough that the size bound cannot decide
    assert stamp_clearly_valid(batch, window, tight, STAMP) is None
    batch.events[2].attributes.pop("a")
    assert stamp_clearly_valid(batch, window, tight, STAMP) is not None


def test_map_entries_always_encode_key_and_value() -> None:
    """The Protobuf runtime property the attribute columns rely on (see columns.py)."""
    event = Event()
    event.attributes[""] = ""
    assert event.SerializeToString() == b"\x32\x04\x0a\x00\x12\x00"


def test_a_non_ascii_value_within_its_limit_in_characters_defers_and_is_accepted() -> None:
    window = ObservedWindow.around(NOW_NS, SETTINGS)
    batch = EventBatch(protocol_version=1, schema_version=1)
    event = batch.events.add(record_id="r1", type="\u00e9\u00e9\u00e9")  # 3 characters, 6 bytes
    event.observed_at.seconds = NOW_S
    assert stamp_clearly_valid(batch, window, SETTINGS, STAMP) is None
    assert isinstance(_exact(batch), bytes)
