"""Hypothesis strategies that more than one property test draws from.

A strategy lives here once two test modules need it, so that a fix to the shape
of the generated data (a missing edge case, a bound) reaches every law that
relies on it. Strategies used by one test stay beside that test.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

JSON_SCALARS: st.SearchStrategy[Any] = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
)
"""Every JSON scalar Python's ``json`` produces, NaN and infinities included:
decoders must refuse those, not crash on them."""


def json_values(
    scalars: st.SearchStrategy[Any] = JSON_SCALARS,
    keys: st.SearchStrategy[str] | None = None,
    *,
    max_size: int = 4,
    max_leaves: int = 12,
) -> st.SearchStrategy[Any]:
    """Nested JSON documents: ``scalars`` at the leaves, lists and objects (keyed by
    ``keys``, short text by default) of at most ``max_size`` entries above them."""
    object_keys = st.text(max_size=8) if keys is None else keys
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=max_size)
            | st.dictionaries(object_keys, inner, max_size=max_size)
        ),
        max_leaves=max_leaves,
    )
