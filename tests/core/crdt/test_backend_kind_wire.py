"""A provider record's backend kind crosses the wire by name, both ways.

`BackendKind` is the one type for the concept; the state lane carries the
``grid.swim.v1.BackendKind`` value whose name is ``BACKEND_KIND_`` plus the
member's name, so reordering either enum cannot silently change a kind.
"""

from __future__ import annotations

import pytest

from grid.core.crdt import GridStateSnapshot, Lane, ProviderRecord
from grid.core.crdt.payload import PayloadError, decode_lane, encode_lane
from grid.core.vocabulary import BackendKind
from grid.errors import ValidationError
from grid.proto_gen.grid.swim.v1 import state_pb2 as pb


def _lane(kind: BackendKind | str) -> bytes:
    record = ProviderRecord(
        name="p",
        cluster="p",
        site="west",
        backend_kind=kind,
        models=("m",),  # type: ignore[arg-type]
    )
    return encode_lane(GridStateSnapshot.empty("west").put_provider("p", record).state)


def test_every_kind_has_the_proto_value_of_its_name() -> None:
    names = set(pb.BackendKind.DESCRIPTOR.values_by_name) - {"BACKEND_KIND_UNSPECIFIED"}
    assert names == {f"BACKEND_KIND_{kind.name}" for kind in BackendKind}


@pytest.mark.parametrize("kind", list(BackendKind))
def test_each_kind_round_trips_as_the_enum(kind: BackendKind) -> None:
    msg = pb.StateLane.FromString(_lane(kind))
    assert pb.BackendKind.Name(msg.providers[0].record.backend_kind) == f"BACKEND_KIND_{kind.name}"
    state = decode_lane(Lane.STATE, _lane(kind), "west")
    decoded = state.live_providers()["p"].backend_kind  # type: ignore[union-attr]
    assert decoded is kind


def test_a_record_given_the_string_value_holds_the_enum() -> None:
    record = ProviderRecord(name="p", cluster="p", site="west", backend_kind="remote")  # type: ignore[arg-type]
    assert record.backend_kind is BackendKind.REMOTE
    with pytest.raises(ValidationError):
        ProviderRecord(name="p", cluster="p", site="west", backend_kind="edge")  # type: ignore[arg-type]


@pytest.mark.parametrize("number", [0, 99])
def test_an_unspecified_or_unknown_kind_is_refused(number: int) -> None:
    msg = pb.StateLane.FromString(_lane(BackendKind.LOCAL))
    msg.providers[0].record.backend_kind = number  # type: ignore[assignment]
    with pytest.raises(PayloadError) as caught:
        decode_lane(Lane.STATE, msg.SerializeToString(deterministic=True), "west")
    assert caught.value.code == "payload_invalid"
