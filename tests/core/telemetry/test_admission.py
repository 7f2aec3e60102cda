"""The seed-004 pipeline decisions in order: roster, rate, capacity, content, batch."""

from __future__ import annotations

import pytest
from google.protobuf.unknown_fields import UnknownFieldSet

from grid.core.telemetry.admission import Admission
from grid.core.telemetry.refusals import (
    REFUSALS,
    AgentNotAdmitted,
    AgentNotRegistered,
    BatchBodyTooLarge,
    GatewayAtCapacity,
    InvalidBatch,
    RateLimited,
    TelemetryRefusal,
    UnsupportedContentType,
    UnsupportedProtocolVersion,
)
from grid.core.telemetry.roster import Roster, RosterRecord
from grid.core.telemetry.settings import MIB, GatewaySettings
from grid.core.telemetry.stamping import ReceptionStamp
from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import Event, InventoryRecord

from .conftest import NOW_NS, event_batch, inventory_batch

RECEPTION = ReceptionStamp("gw-1", NOW_NS, "req-1")


def _admission(**settings: object) -> Admission:
    roster = Roster()
    roster.replay(
        [
            RosterRecord("agent-a", "tenant-a", "registered", 1),
            RosterRecord("agent-a", "tenant-a", "admitted", 2),
            RosterRecord("agent-b", "tenant-b", "registered", 3),
        ]
    )
    return Admission(GatewaySettings(**settings), roster)  # type: ignore[arg-type]


def test_refusal_codes_and_statuses_match_the_spec_table() -> None:
    table = {cls.code: cls.status for cls in REFUSALS}
    assert table == {
        "agent_not_registered": 403,
        "agent_not_admitted": 403,
        "rate_limited": 429,
        "gateway_at_capacity": 503,
        "unsupported_protocol_version": 400,
        "unsupported_content_type": 415,
        "batch_body_too_large": 413,
        "invalid_batch": 400,
        "backbone_unavailable": 503,
    }


def test_settings_defaults_are_seed_004s() -> None:
    s = GatewaySettings()
    assert s.listen == "0.0.0.0:8443"
    assert s.request_body_bytes_max == 8 * MIB and s.held_body_bytes_max == 128 * MIB
    assert (s.event_batch_records_max, s.inventory_batch_records_max) == (1000, 64)
    assert (s.observed_ahead_max_s, s.observed_age_max_s) == (300, 7 * 24 * 3600)


def test_no_identity_is_not_registered() -> None:
    with pytest.raises(AgentNotRegistered):
        Admission.identify(None)


def test_roster_is_checked_before_rate_and_capacity() -> None:
    adm = _admission(held_body_bytes_max=10, burst_per_agent=1)
    with pytest.raises(AgentNotRegistered):
        adm.admit("stranger", "events", 10**9, 0.0)
    with pytest.raises(AgentNotAdmitted):
        adm.admit("agent-b", "events", 10**9, 0.0)
    assert adm.capacity.requests_in_flight == 0


def test_rate_is_checked_before_capacity_even_with_a_huge_content_length() -> None:
    adm = _admission(burst_per_agent=1, rate_per_agent_rps=1, held_body_bytes_max=100)
    adm.release(adm.admit("agent-a", "events", 10, 0.0))
    with pytest.raises(RateLimited) as info:
        adm.admit("agent-a", "events", 10**12, 0.1)
    assert info.value.status == 429 and info.value.retry_after_seconds == 1
    assert adm.capacity.held_body_bytes == 0


def test_inventory_shares_the_agents_single_bucket() -> None:
    adm = _admission(burst_per_agent=2, rate_per_agent_rps=0.01)
    adm.release(adm.admit("agent-a", "events", 10, 0.0))
    adm.release(adm.admit("agent-a", "inventory", 10, 0.0))
    with pytest.raises(RateLimited):
        adm.admit("agent-a", "inventory", 10, 0.0)
    with pytest.raises(RateLimited):
        adm.admit("agent-a", "events", 10, 0.0)


def test_capacity_is_reserved_by_content_length_before_any_body_is_read() -> None:
    adm = _admission(held_body_bytes_max=10 * MIB)
    held = adm.admit("agent-a", "events", 6 * MIB, 0.0)
    with pytest.raises(GatewayAtCapacity) as info:
        adm.admit("agent-a", "events", 5 * MIB, 0.0)
    assert info.value.retry_after_seconds >= 1
    adm.release(held)
    adm.release(adm.admit("agent-a", "events", 5 * MIB, 0.0))


def test_content_type_and_declared_length_are_step_4() -> None:
    adm = _admission()
    with pytest.raises(UnsupportedContentType):
        adm.check_content("application/json", 10)
    with pytest.raises(BatchBodyTooLarge):
        adm.check_content("application/x-protobuf", 8 * MIB + 1)
    adm.check_content("application/x-protobuf; charset=binary", 8 * MIB)


def _accept(adm: Admission, body: bytes, route: str = "events") -> object:
    ticket = adm.admit("agent-a", route, len(body), 0.0)  # type: ignore[arg-type]
    try:
        return adm.accept(ticket, body, RECEPTION)
    finally:
        adm.release(ticket)


@pytest.mark.parametrize(("field", "value"), [("protocol_version", 2), ("schema_version", 0)])
def test_unsupported_versions_are_refused(field: str, value: int) -> None:
    body = event_batch(**{field: value}).SerializeToString()
    with pytest.raises(UnsupportedProtocolVersion, match=field):
        _accept(_admission(), body)


def test_too_many_records_is_body_too_large_per_route() -> None:
    adm = _admission()
    with pytest.raises(BatchBodyTooLarge):
        _accept(adm, event_batch(1001).SerializeToString())
    with pytest.raises(BatchBodyTooLarge):
        _accept(adm, inventory_batch(65).SerializeToString(), "inventory")
    assert len(_accept(adm, inventory_batch(64).SerializeToString(), "inventory").records) == 64  # type: ignore[attr-defined]


def test_undecodable_body_is_invalid_batch() -> None:
    with pytest.raises(InvalidBatch, match="decode"):
        _accept(_admission(), b"\xff\xff\xff\xff")


def test_invalid_record_refuses_the_whole_batch_naming_its_index() -> None:
    batch = event_batch(3)
    batch.events[2].record_id = ""
    with pytest.raises(InvalidBatch, match="record 2"):
        _accept(_admission(), batch.SerializeToString())
    batch = event_batch(3)
    batch.events[1].record_id = "r0"
    with pytest.raises(InvalidBatch, match="record 1: record_id repeats"):
        _accept(_admission(), batch.SerializeToString())


@pytest.mark.parametrize(
    ("offset_s", "accepted"),
    [(299, True), (301, False), (-7 * 24 * 3600 + 1, True), (-7 * 24 * 3600 - 1, False)],
)
def test_observed_at_skew_and_age_policy_refuses_without_retimestamping(
    offset_s: int, accepted: bool
) -> None:
    batch = event_batch(2)
    batch.events[1].observed_at.seconds += offset_s
    if not accepted:
        with pytest.raises(InvalidBatch, match=r"record 1: observed_at .*not retimestamped"):
            _accept(_admission(), batch.SerializeToString())
        return
    stamped = _accept(_admission(), batch.SerializeToString())
    event = Event.FromString(stamped.records[1][1])  # type: ignore[attr-defined]
    assert event.observed_at == batch.events[1].observed_at


def test_missing_observed_at_is_invalid() -> None:
    batch = event_batch(1)
    batch.events[0].ClearField("observed_at")
    with pytest.raises(InvalidBatch, match="observed_at is missing"):
        _accept(_admission(), batch.SerializeToString())


def test_stamping_replaces_client_supplied_origin_and_reception() -> None:
    batch = inventory_batch(1)
    rec = batch.records[0]
    rec.origin.agent_id, rec.origin.tenant_id = "forged-agent", "forged-tenant"
    rec.reception.gateway_id, rec.reception.request_id = "forged-gw", "forged-req"
    rec.reception.received_at.seconds = 1
    stamped = _accept(_admission(), batch.SerializeToString(), "inventory")
    out = InventoryRecord.FromString(stamped.records[0][1])  # type: ignore[attr-defined]
    assert (out.origin.agent_id, out.origin.tenant_id) == ("agent-a", "tenant-a")
    assert (out.reception.gateway_id, out.reception.request_id) == ("gw-1", "req-1")
    assert out.reception.received_at.seconds * 10**9 + out.reception.received_at.nanos == NOW_NS
    assert out.record_id == "i0" and out.observed_at == rec.observed_at


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


@pytest.mark.parametrize("batch_count", [1, 3])
def test_unknown_protobuf_fields_are_dropped_before_stamping(batch_count: int) -> None:
    # Field 99 (varint) unknown to the schema, in each record and in the batch itself;
    # the published bytes hold none of them.
    unknown = b"\x98\x06\x2a"
    batch = event_batch(batch_count)
    body = bytearray()
    for field, value in batch.ListFields():
        if field.name != "events":
            body += type(batch)(**{field.name: value}).SerializeToString()
    for event in batch.events:
        record = event.SerializeToString() + unknown
        body += b"\x1a" + _varint(len(record)) + record  # events is field 3
    body += unknown
    stamped = _accept(_admission(), bytes(body), "events")
    for _record_id, data in stamped.records:  # type: ignore[attr-defined]
        assert not len(UnknownFieldSet(Event.FromString(data)))
        assert unknown not in data


def test_batch_id_is_stable_for_identical_bodies_and_differs_otherwise() -> None:
    adm = _admission()
    body = event_batch(2).SerializeToString()
    first = _accept(adm, body)
    again = _accept(adm, body)
    other = _accept(adm, event_batch(3).SerializeToString())
    assert first.batch_id == again.batch_id != other.batch_id  # type: ignore[attr-defined]


def test_every_refusal_is_a_telemetry_refusal_with_retry_pace_only_when_set() -> None:
    assert RateLimited("x", retry_after_s=0.2).retry_after_seconds == 1
    assert InvalidBatch("x").retry_after_seconds == 0
    assert all(issubclass(cls, TelemetryRefusal) for cls in REFUSALS)
