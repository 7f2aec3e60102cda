"""A provider record carries its capacityWeight over the state lane (§14)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.core.crdt import GridStateSnapshot, Lane, ProviderRecord
from grid.core.crdt.payload import PayloadError, PayloadLimits, decode_lane, encode_lane
from grid.core.crdt.record import RecordSignals
from grid.core.resources import InferenceProvider, parse_resource
from grid.core.routing.mesh_view import record_for, remote_provider
from grid.errors import ValidationError
from grid.proto_gen.grid.swim.v1 import state_pb2 as pb


def _record(weight: int = 1) -> ProviderRecord:
    return ProviderRecord(
        name="p",
        cluster="p",
        site="west",
        backend_kind="local",  # type: ignore[arg-type]
        models=("llama",),
        observed_at=1_700_000_000.0,
        capacity_weight=weight,
    )


def _round_trip(record: ProviderRecord) -> ProviderRecord:
    state = GridStateSnapshot.empty("west").put_provider(record.name, record).state
    decoded = decode_lane(Lane.STATE, encode_lane(state), "west", PayloadLimits())
    return decoded.live_providers()[record.name]  # type: ignore[union-attr]


@given(st.integers(1, 1000))
def test_any_weight_round_trips(weight: int) -> None:
    assert _round_trip(_record(weight)).capacity_weight == weight


def test_the_default_weight_encodes_as_before() -> None:
    state = GridStateSnapshot.empty("west").put_provider("p", _record()).state
    lane = pb.StateLane()
    lane.ParseFromString(encode_lane(state))
    assert not lane.providers[0].record.HasField("capacity_weight")


@pytest.mark.parametrize("weight", [0, 1001, True])
def test_a_weight_outside_the_range_is_refused(weight: int) -> None:
    with pytest.raises(ValidationError):
        _record(weight)


def test_a_peer_weight_outside_the_range_is_dropped_as_invalid() -> None:
    state = GridStateSnapshot.empty("west").put_provider("p", _record(5)).state
    lane = pb.StateLane()
    lane.ParseFromString(encode_lane(state))
    lane.providers[0].record.capacity_weight = 5000
    with pytest.raises(PayloadError):
        decode_lane(Lane.STATE, lane.SerializeToString(), "west", PayloadLimits())


def test_the_weight_travels_from_the_spec_to_the_remote_provider() -> None:
    provider = parse_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "InferenceProvider",
            "metadata": {"name": "p"},
            "spec": {
                "gridNetworkRef": "grid",
                "backendKind": "local",
                "providerKind": "self_hosted",
                "models": [{"name": "llama"}],
                "capacityWeight": 12,
            },
        }
    )
    assert isinstance(provider, InferenceProvider)
    record = record_for(provider, "west", signals=RecordSignals(), healthy=True, observed_at_s=1.0)
    assert record.capacity_weight == 12
    assert remote_provider(_round_trip(record), "grid").spec.capacity_weight == 12
