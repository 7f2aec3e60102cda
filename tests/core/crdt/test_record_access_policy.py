"""A provider record carries its providerKind and access-policy match labels over the wire.

The consuming site enforces ``accessPolicy.siteSelector.matchLabels`` of a
remote provider, so the labels must survive the state lane exactly, encode
deterministically, and be bounded like every other count a peer controls.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.crdt import GridStateSnapshot, Lane, ProviderRecord
from grid.core.crdt.payload import PayloadError, PayloadLimits, decode_lane, encode_lane
from grid.core.crdt.record import PROVIDER_KINDS
from grid.errors import ValidationError
from grid.proto_gen.grid.swim.v1 import state_pb2 as pb


def _record(**overrides: object) -> ProviderRecord:
    fields: dict[str, object] = {
        "name": "vllm-west",
        "cluster": "vllm-west",
        "site": "west",
        "backend_kind": "local",
        "models": ("llama",),
        "observed_at": 1_700_000_000.0,
    }
    fields.update(overrides)
    return ProviderRecord(**fields)  # type: ignore[arg-type]


def _round_trip(record: ProviderRecord, limits: PayloadLimits | None = None) -> ProviderRecord:
    state = GridStateSnapshot.empty(record.site).put_provider(record.name, record).state
    decoded = decode_lane(Lane.STATE, encode_lane(state), record.site, limits or PayloadLimits())
    return decoded.live_providers()[record.name]  # type: ignore[union-attr]


def test_a_record_defaults_to_self_hosted_with_no_access_labels() -> None:
    record = _record()
    assert record.provider_kind == "self_hosted"
    assert record.access_match_labels == ()


def test_provider_kind_and_match_labels_round_trip_through_the_state_lane() -> None:
    record = _record(
        provider_kind="vertex", access_match_labels=(("team", "east"), ("env", "prod"))
    )
    decoded = _round_trip(record)
    assert decoded == record
    assert decoded.provider_kind == "vertex"
    assert decoded.access_match_labels == (("env", "prod"), ("team", "east"))


def test_match_labels_are_kept_sorted_so_equal_policies_encode_identically() -> None:
    a = _record(access_match_labels=(("b", "2"), ("a", "1")))
    b = _record(access_match_labels=(("a", "1"), ("b", "2")))
    assert a == b
    state_a = GridStateSnapshot.empty("west").put_provider("p", a).state
    state_b = GridStateSnapshot.empty("west").put_provider("p", b).state
    assert encode_lane(state_a) == encode_lane(state_b)


@pytest.mark.parametrize(
    "overrides",
    [
        {"provider_kind": "azure"},
        {"access_match_labels": (("", "x"),)},
        {"access_match_labels": (("team", "a"), ("team", "b"))},
    ],
)
def test_a_record_with_a_bad_kind_or_selector_is_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        _record(**overrides)


def _state_bytes(mutate: object) -> bytes:
    """A state lane of one record, with its message changed by ``mutate``."""
    msg = pb.StateLane()
    reg = msg.providers.add(provider_id="p", revision=1, writer_id="west")
    reg.record.CopyFrom(
        pb.ProviderRecord(
            name="p", cluster="p", site="west", backend_kind=1, phase=2, models=["llama"]
        )
    )
    mutate(reg.record)  # type: ignore[operator]
    return msg.SerializeToString(deterministic=True)


def test_a_record_from_a_peer_without_the_provider_kind_reads_as_self_hosted() -> None:
    payload = _state_bytes(lambda r: None)
    state = decode_lane(Lane.STATE, payload, "west")
    assert state.live_providers()["p"].provider_kind == "self_hosted"  # type: ignore[union-attr]


def test_an_unknown_provider_kind_number_is_refused() -> None:
    payload = _state_bytes(lambda r: setattr(r, "provider_kind", 99))
    with pytest.raises(PayloadError) as caught:
        decode_lane(Lane.STATE, payload, "west")
    assert caught.value.code == "payload_invalid"


def test_duplicate_match_label_keys_from_a_peer_are_refused() -> None:
    def twice(record: pb.ProviderRecord) -> None:
        record.access_match_labels.add(key="team", value="a")
        record.access_match_labels.add(key="team", value="b")

    with pytest.raises(PayloadError) as caught:
        decode_lane(Lane.STATE, _state_bytes(twice), "west")
    assert caught.value.code == "payload_invalid"


def test_match_labels_beyond_the_limit_are_refused_before_anything_is_built() -> None:
    limits = PayloadLimits(match_labels_max=3)
    labels = tuple((f"k{i}", "v") for i in range(4))
    record = _record(access_match_labels=labels)
    with pytest.raises(PayloadError) as caught:
        _round_trip(record, limits)
    assert caught.value.code == "payload_limit"
    assert (
        _round_trip(_record(access_match_labels=labels[:3]), limits).access_match_labels
        == (labels[:3])
    )


_label_keys = st.text(alphabet="abcdefghij./-", min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(PROVIDER_KINDS),
    labels=st.dictionaries(_label_keys, st.text(max_size=12), max_size=8),
)
def test_any_kind_and_selector_round_trip(kind: str, labels: dict[str, str]) -> None:
    record = _record(provider_kind=kind, access_match_labels=tuple(labels.items()))
    assert _round_trip(record) == record
