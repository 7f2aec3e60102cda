"""`json_copy` is the JSON round trip: the same value, the same types, the same refusals."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.adapters.store.objects import json_copy
from grid.errors import ValidationError
from grid.testing.strategies import json_values


class Colour(StrEnum):
    RED = "red"


ODD_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and the infinities are refused
    st.text(max_size=6),
    st.just(Colour.RED),  # a str subclass: the round trip makes it a plain str
)
ODD_VALUES = st.recursive(
    ODD_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)  # tuples become lists
        | st.dictionaries(st.one_of(st.text(max_size=4), st.integers(0, 3)), inner, max_size=3)
    ),
    max_leaves=10,
)


def _typed(value: Any) -> Any:
    """``value`` with every type spelled out, so equal values of other types differ."""
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_typed(v) for v in value])
    return (type(value).__name__, repr(value))


@given(st.one_of(json_values(), ODD_VALUES))
def test_json_copy_is_the_json_round_trip(value: Any) -> None:
    try:
        expected = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        with pytest.raises(ValidationError):
            json_copy(value, "spec")
        return
    copied = json_copy(value, "spec")
    assert _typed(copied) == _typed(expected)


def test_json_copy_shares_no_container_with_its_input() -> None:
    value = {"data": {"k": "v"}, "list": [{"a": 1}]}
    copied = json_copy(value, "spec")
    assert copied == value
    assert copied["data"] is not value["data"] and copied["list"][0] is not value["list"][0]
