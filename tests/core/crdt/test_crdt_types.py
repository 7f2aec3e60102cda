"""Behaviour of the three CRDTs and the provider record, one rule per test."""

from __future__ import annotations

import pytest

from grid.core.crdt import (
    CounterRefusal,
    GCounter,
    LwwRegister,
    ORSet,
    ProviderRecord,
    RecordSignals,
)
from grid.errors import GridError, ValidationError


def test_lww_higher_revision_wins_regardless_of_writer() -> None:
    old = LwwRegister("a", 3, "zulu")
    new = LwwRegister("b", 4, "alpha")
    assert old.merge(new) == new
    assert new.merge(old) == new


def test_lww_equal_revision_breaks_tie_by_lexicographic_writer_id() -> None:
    a = LwwRegister("from-east", 7, "east")
    b = LwwRegister("from-west", 7, "west")
    assert a.merge(b).value == "from-west"
    assert b.merge(a).value == "from-west"


def test_lww_assign_wins_over_its_predecessor() -> None:
    reg = LwwRegister("x", 9, "west")
    written = reg.assign("y", "east")
    assert written.revision == 10
    assert reg.merge(written) == written


def test_lww_rejects_negative_revision() -> None:
    with pytest.raises(ValueError):
        LwwRegister("x", -1, "a")


def test_orset_add_then_remove_removes() -> None:
    s: ORSet[str] = ORSet().add("llama", "east").remove("llama")
    assert "llama" not in s
    assert len(s.tombstones) == 1


def test_orset_tags_are_unique_per_replica_without_randomness() -> None:
    s: ORSet[str] = ORSet().add("m", "east").add("m", "east").add("n", "east")
    tags = [tag for tags in s.entries.values() for tag in tags]
    assert sorted(tags) == [("east", 1), ("east", 2), ("east", 3)]


def test_orset_remove_of_absent_element_is_a_no_op() -> None:
    s: ORSet[str] = ORSet().add("m", "east")
    assert s.remove("other") is s


def test_orset_concurrent_add_survives_stale_tombstone() -> None:
    """Seed 003: one site adds a model while another removes it; the add's fresh tag wins."""
    shared: ORSet[str] = ORSet().add("llama", "east")
    remover = shared.remove("llama")  # west observed only east's first tag
    adder = shared.add("llama", "west")  # a fresh tag west's remove never saw
    assert "llama" in remover.merge(adder)
    assert "llama" in adder.merge(remover)


def test_orset_remove_after_observing_every_add_wins() -> None:
    a: ORSet[str] = ORSet().add("m", "east")
    b: ORSet[str] = ORSet().add("m", "west")
    both = a.merge(b).remove("m")
    assert "m" not in both.merge(a).merge(b)


def test_gcounter_value_is_sum_and_merge_takes_slot_max() -> None:
    east = GCounter().increment("east", 5)
    west = GCounter().increment("west", 3)
    stale_east = GCounter().increment("east", 2)
    merged = east.merge(west).merge(stale_east)
    assert merged.value == 8
    assert merged.slot("east") == 5


def test_gcounter_refuses_decrement() -> None:
    with pytest.raises(CounterRefusal) as info:
        GCounter().increment("east", -1)
    assert info.value.code == "counter_decrement"


def test_gcounter_refuses_write_to_foreign_slot() -> None:
    with pytest.raises(CounterRefusal) as info:
        GCounter().increment("east", 1, slot="west")
    assert info.value.code == "counter_foreign_slot"
    assert isinstance(info.value, GridError)


def test_gcounter_build_refuses_negative_slot() -> None:
    with pytest.raises(CounterRefusal):
        GCounter.build({"east": -3})


def test_provider_record_missing_signal_is_none_not_zero() -> None:
    rec = ProviderRecord(name="p", cluster="c", site="east", backend_kind="local")
    assert rec.signals.queue_depth is None
    assert rec.signals.p99_latency_ms is None


def test_provider_record_sorts_models_for_deterministic_repr() -> None:
    a = ProviderRecord("p", "c", "east", "local", models=("b", "a", "b"))
    assert a.models == ("a", "b")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"backend_kind": "onprem"},
        {"phase": "Running"},
        {"observed_at": float("nan")},
        {"observed_at": 1e300},
        {"models": ("",)},
        {"name": ""},
    ],
)
def test_provider_record_validates_fields(kwargs: dict[str, object]) -> None:
    base: dict[str, object] = {
        "name": "p",
        "cluster": "c",
        "site": "east",
        "backend_kind": "local",
    }
    base.update(kwargs)
    with pytest.raises(ValidationError):
        ProviderRecord(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"queue_depth": 1.5},
        {"kv_cache_utilization": -0.1},
        {"p99_latency_ms": float("inf")},
        {"cost_per_million_input_tokens": -1.0},
    ],
)
def test_provider_signals_validate_ranges(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        RecordSignals(**kwargs)


def test_provider_record_observed_at_as_utc_datetime() -> None:
    rec = ProviderRecord("p", "c", "east", "local", observed_at=86400.5)
    assert rec.observed_at_utc.isoformat() == "1970-01-02T00:00:00.500000+00:00"
