"""CRDT laws: merges are commutative, associative and idempotent, and any
delivery order of an operation history (duplicates included) converges."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import TypeVar

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.crdt import GCounter, LwwRegister, ORSet

T = TypeVar("T")

REPLICAS = ("east", "west", "north")
ELEMENTS = ("llama", "mistral", "qwen", "phi")

lww_st = st.builds(
    LwwRegister,
    value=st.sampled_from(("a", "b", "c", None)),
    revision=st.integers(min_value=0, max_value=4),
    writer_id=st.sampled_from(REPLICAS),
)

gcounter_st = st.dictionaries(
    st.sampled_from(REPLICAS), st.integers(min_value=0, max_value=50), max_size=3
).map(GCounter.build)


@st.composite
def orset_history(draw: st.DrawFn) -> list[ORSet[str]]:
    """Every state produced by replicas that add, remove and sync with each other."""
    states: dict[str, ORSet[str]] = {r: ORSet() for r in REPLICAS}
    produced: list[ORSet[str]] = []
    ops = draw(
        st.lists(
            st.tuples(
                st.sampled_from(("add", "remove", "sync")),
                st.sampled_from(REPLICAS),
                st.sampled_from(ELEMENTS),
                st.sampled_from(REPLICAS),
            ),
            max_size=25,
        )
    )
    for op, replica, element, peer in ops:
        if op == "add":
            states[replica] = states[replica].add(element, replica)
        elif op == "remove":
            states[replica] = states[replica].remove(element)
        else:
            states[replica] = states[replica].merge(states[peer])
        produced.append(states[replica])
    return produced


orset_st = orset_history().map(lambda states: states[-1] if states else ORSet())


def _check_laws(a: T, b: T, c: T, merge: Callable[[T, T], T]) -> None:
    assert merge(a, b) == merge(b, a)
    assert merge(merge(a, b), c) == merge(a, merge(b, c))
    assert merge(a, a) == a
    assert merge(merge(a, b), b) == merge(a, b)


@settings(max_examples=200, deadline=None)
@given(lww_st, lww_st, lww_st)
def test_lww_merge_laws(
    a: LwwRegister[str | None], b: LwwRegister[str | None], c: LwwRegister[str | None]
) -> None:
    _check_laws(a, b, c, lambda x, y: x.merge(y))


@settings(max_examples=200, deadline=None)
@given(gcounter_st, gcounter_st, gcounter_st)
def test_gcounter_merge_laws(a: GCounter, b: GCounter, c: GCounter) -> None:
    _check_laws(a, b, c, lambda x, y: x.merge(y))


@settings(max_examples=100, deadline=None)
@given(orset_st, orset_st, orset_st)
def test_orset_merge_laws(a: ORSet[str], b: ORSet[str], c: ORSet[str]) -> None:
    _check_laws(a, b, c, lambda x, y: x.merge(y))


@settings(max_examples=100, deadline=None)
@given(orset_history(), st.data())
def test_orset_any_delivery_order_with_duplicates_converges(
    history: list[ORSet[str]], data: st.DataObject
) -> None:
    empty: ORSet[str] = ORSet()
    expected = reduce(lambda x, y: x.merge(y), history, empty)
    dupes = data.draw(st.lists(st.sampled_from(history), max_size=10)) if history else []
    delivery = data.draw(st.permutations(history + dupes))
    assert reduce(lambda x, y: x.merge(y), delivery, empty) == expected


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(REPLICAS), st.integers(min_value=0, max_value=9)), max_size=30
    ),
    st.data(),
)
def test_gcounter_any_delivery_order_converges_to_the_true_sum(
    increments: list[tuple[str, int]], data: st.DataObject
) -> None:
    states = {r: GCounter() for r in REPLICAS}
    produced: list[GCounter] = []
    for replica, amount in increments:
        states[replica] = states[replica].increment(replica, amount)
        produced.append(states[replica])
    delivery = data.draw(st.permutations(produced + produced[: len(produced) // 2]))
    merged = reduce(lambda x, y: x.merge(y), delivery, GCounter())
    assert merged.value == sum(amount for _, amount in increments)


@settings(max_examples=100, deadline=None)
@given(st.lists(lww_st, min_size=1, max_size=12), st.data())
def test_lww_any_delivery_order_converges_to_the_greatest_stamp(
    writes: list[LwwRegister[str | None]], data: st.DataObject
) -> None:
    delivery = data.draw(st.permutations(writes + writes[:3]))
    merged = reduce(lambda x, y: x.merge(y), delivery)
    assert merged.stamp == max(w.stamp for w in writes)
    assert merged == reduce(lambda x, y: x.merge(y), writes)
