"""Lane payload bytes: deterministic encoding and a strict untrusted decoder."""

from __future__ import annotations

import pytest

from grid.core.crdt import (
    CertLaneValue,
    GatewayLaneValue,
    GridStateSnapshot,
    Lane,
    MetadataLaneValue,
    PrivateKeyRefused,
    ProviderRecord,
    RecordSignals,
    StateLaneValue,
)
from grid.core.crdt.payload import (
    PayloadError,
    PayloadLimits,
    decode_lane,
    decode_snapshot,
    encode_lane,
    encode_snapshot,
)
from grid.core.crdt.record import ModelInfo
from grid.errors import ProtocolError
from grid.proto_gen.grid.swim.v1 import state_pb2 as pb


def _snapshot() -> GridStateSnapshot:
    rec = ProviderRecord(
        name="vllm-a",
        cluster="vllm-a",
        site="east",
        backend_kind="remote",
        models=("qwen", "llama"),
        healthy=False,
        observed_at=1_700_000_000.5,
        signals=RecordSignals(queue_depth=0.0, p99_latency_ms=120.0),
        phase="Degraded",
        model_info=(ModelInfo("qwen", ("tools", "chat"), 32768), ModelInfo("llama", ("chat",))),
        cost_per_million_output_tokens=0.6,
        cost_per_million_input_tokens=0.2,
    )
    snap = GridStateSnapshot.empty("east").put_provider("vllm-a", rec)
    snap = snap.put_provider("gone", rec).remove_provider("gone")
    snap = snap.add_capability("models", "llama").add_capability("tools", "search")
    snap = snap.add_capability("agents", "a1").remove_capability("agents", "a1")
    snap = snap.add_spend("tenant-a", 12)
    snap = snap.set_lane(Lane.GATEWAY, GatewayLaneValue("10.0.0.1:443", (("edge", "1.2.3.4:80"),)))
    snap = snap.set_lane(Lane.CERT, CertLaneValue("-----BEGIN CERTIFICATE-----\nx\n"))
    return snap.set_lane(Lane.METADATA, MetadataLaneValue("eu", "eu-1", "eu", (("tier", "a"),)))


def test_every_lane_round_trips() -> None:
    snap = _snapshot()
    for lane in Lane:
        value = snap.lane_value(lane)
        assert decode_lane(lane, encode_lane(value), "east") == value


def test_zero_signal_stays_zero_and_missing_stays_missing() -> None:
    state = decode_lane(Lane.STATE, encode_lane(_snapshot().state), "east")
    record = state.live_providers()["vllm-a"]  # type: ignore[union-attr]
    assert record.signals.queue_depth == 0.0
    assert record.signals.kv_cache_utilization is None
    assert record.healthy is False


def test_the_spec_prices_travel_in_the_record_not_in_its_signals() -> None:
    state = decode_lane(Lane.STATE, encode_lane(_snapshot().state), "east")
    record = state.live_providers()["vllm-a"]  # type: ignore[union-attr]
    assert (record.cost_per_million_input_tokens, record.cost_per_million_output_tokens) == (
        0.2,
        0.6,
    )
    assert record.signals.cost_per_million_input_tokens is None


def test_whole_snapshot_round_trips_byte_for_byte() -> None:
    data = encode_snapshot(_snapshot())
    again = decode_snapshot(data)
    assert again == _snapshot()
    assert encode_snapshot(again) == data


def test_encoding_does_not_depend_on_insertion_order() -> None:
    a = GridStateSnapshot.empty("east").add_spend("t1", 1).add_spend("t2", 1)
    b = GridStateSnapshot.empty("east").add_spend("t2", 1).add_spend("t1", 1)
    assert encode_lane(a.state) == encode_lane(b.state)


def test_cert_payload_with_private_key_is_refused_as_protocol_error() -> None:
    payload = pb.CertLane(pem="-----BEGIN RSA PRIVATE KEY-----\nsecret\n").SerializeToString()
    with pytest.raises(PrivateKeyRefused) as info:
        decode_lane(Lane.CERT, payload, "east")
    assert isinstance(info.value, ProtocolError)
    assert "secret" not in str(info.value)


def _state_with(**fields: object) -> bytes:
    return pb.StateLane(**fields).SerializeToString()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"\xff\xff\xff", "payload_malformed"),
        (
            _state_with(providers=[pb.ProviderRegister(provider_id="p", writer_id="west")]),
            "foreign_writer",
        ),
        (
            _state_with(
                spend=[pb.TenantSpend(tenant="t", slots=[pb.CounterSlot(site="west", count=9)])]
            ),
            "foreign_writer",
        ),
        (
            _state_with(models=pb.OrSet(tombstones=[pb.Tag(replica="west", counter=1)])),
            "foreign_writer",
        ),
        (
            _state_with(
                providers=[
                    pb.ProviderRegister(
                        provider_id="p",
                        writer_id="east",
                        record=pb.ProviderRecord(name="p", cluster="c", site="east"),
                    )
                ]
            ),
            "payload_invalid",
        ),
        (
            _state_with(
                providers=[
                    pb.ProviderRegister(
                        provider_id="p",
                        writer_id="east",
                        record=pb.ProviderRecord(
                            name="p",
                            cluster="c",
                            site="east",
                            backend_kind=pb.BACKEND_KIND_LOCAL,
                            phase=pb.PROVIDER_PHASE_AVAILABLE,
                            signals=pb.ProviderSignals(queue_depth=float("nan")),
                        ),
                    )
                ]
            ),
            "payload_invalid",
        ),
    ],
)
def test_bad_state_payloads_raise_payload_error_with_code(payload: bytes, code: str) -> None:
    with pytest.raises(PayloadError) as info:
        decode_lane(Lane.STATE, payload, "east")
    assert info.value.code == code


def test_payload_over_the_byte_limit_is_refused_before_parsing() -> None:
    with pytest.raises(PayloadError) as info:
        decode_lane(Lane.CERT, b"\x00" * 65, "east", PayloadLimits(payload_bytes_max=64))
    assert info.value.code == "payload_too_large"


def test_too_many_providers_is_refused() -> None:
    regs = [pb.ProviderRegister(provider_id=f"p{i}", writer_id="east") for i in range(3)]
    with pytest.raises(PayloadError) as info:
        decode_lane(Lane.STATE, _state_with(providers=regs), "east", PayloadLimits(providers_max=2))
    assert info.value.code == "payload_limit"


def test_default_limits_take_one_site_with_2000_providers_and_refuse_4097() -> None:
    regs = [pb.ProviderRegister(provider_id=f"p{i}", writer_id="east") for i in range(4097)]
    decoded = decode_lane(Lane.STATE, _state_with(providers=regs[:2000]), "east")
    assert isinstance(decoded, StateLaneValue) and len(decoded.providers) == 2000
    with pytest.raises(PayloadError) as info:
        decode_lane(Lane.STATE, _state_with(providers=regs), "east")
    assert info.value.code == "payload_limit"


def test_unknown_lane_is_refused() -> None:
    with pytest.raises(PayloadError) as info:
        decode_lane("weather", b"", "east")
    assert info.value.code == "unknown_lane"


def test_model_capabilities_and_context_window_round_trip_and_are_bounded() -> None:
    state = decode_lane(Lane.STATE, encode_lane(_snapshot().state), "east")
    record = state.live_providers()["vllm-a"]  # type: ignore[union-attr]
    assert record.info("qwen") == ModelInfo("qwen", ("chat", "tools"), 32768)
    assert record.info("llama").context_window is None
    with pytest.raises(PayloadError):
        decode_lane(
            Lane.STATE, encode_lane(_snapshot().state), "east", PayloadLimits(capabilities_max=1)
        )
