"""The fast canonical JSON path gives exactly the `rfc8785` reference bytes."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.overlay import digest as canonical
from grid.testing.strategies import json_values

KEYS = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6
) | st.sampled_from(["a", "b", "\ue000", "\U0001f600", "\u00e9", "A", ""])
FLOATS = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.0, -0.0, 1.0, 0.7, 1e-4, 9.99e-5, 1e-7, 1e16, 1e21, 1e22, 5e-324, 0.1 + 0.2, 2.0**53]
)
INTS = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1) | st.integers(-(2**60), 2**60)
SCALARS = st.none() | st.booleans() | INTS | FLOATS | st.text(max_size=8)
JSON = json_values(SCALARS, KEYS, max_leaves=20)


def reference(value: Any) -> bytes | type[Exception]:
    try:
        return rfc8785.dumps(value)
    except Exception as exc:  # the reference's error type is the expected outcome
        return type(exc)


def fast(value: Any) -> bytes | type[Exception]:
    try:
        return canonical.dumps(value)
    except Exception as exc:
        return type(exc)


def fast_json(value: Any) -> bytes | type[Exception]:
    try:
        return canonical.dumps_json(value)
    except Exception as exc:
        return type(exc)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_fast_path_matches_the_reference(value: Any) -> None:
    assert fast(value) == reference(value)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_json_data_path_matches_the_reference(value: Any) -> None:
    # JSON keeps string keys only, which is the precondition of dumps_json.
    assert fast_json(value) == reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"\U0001f600": 1, "\ue000": 2},  # UTF-16 order differs from code point order
        {"x": 2**53},  # beyond the JCS integer domain
        {"x": math.inf},
        {"x": float("nan")},
        {"x": "\ud800"},  # lone surrogate
        {1: "non-string key"},
        {"x": object()},
        [1e21, 1e-7, -0.0, 1.0, 123456789012345680.0],
        2**53,
        1.0,
        [-(2**53) - 1],
        {"a": [1, {"b": 2**54}]},
    ],
)
def test_edge_values_behave_like_the_reference(value: Any) -> None:
    assert fast(value) == reference(value)
    if not isinstance(value, dict) or all(isinstance(k, str) for k in value):
        assert fast_json(value) == reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"x": 2**60},  # after ":"
        [1, 2**60],  # after ","
        [2**60],  # after "["
        {"x": [0.5, -(2**60)]},  # negative, after ","
        [9007199254740993.0, 1],  # an integral float beyond 2^53
        {"x": 1e-7, "y": [1, 2e21]},  # exponents
        {"x": 3.0},  # an integral float, before "}"
        [2.0, 0.5],  # before ","
        [0.5, -2.0],  # before "]"
        {"a": [{"b": 1e16}]},  # written 1e+16
    ],
)
def test_every_suspect_number_position_takes_the_reference_path(value: Any) -> None:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical._suspect(text)
    assert fast_json(value) == reference(value)


@pytest.mark.parametrize(
    "text",
    ["v1.0", "x1e+5", "1234567890123456789", "\ue000", "a.0", "\U0001f600"],
)
def test_suspicious_strings_only_cost_speed_never_correctness(text: str) -> None:
    document = {"s": text, "n": [0.5, 12, 1e-3]}
    assert canonical.dumps_json(document) == rfc8785.dumps(document)


def test_typical_overlay_numbers_take_the_fast_path_and_match() -> None:
    document = {"score": 1.0, "parts": [0.0, 0.7, 3 / 13, 1e-3], "rank": 5, "fresh": True}
    assert canonical.dumps(document) == rfc8785.dumps(document)
    assert (
        canonical.dumps(document)
        == b'{"fresh":true,"parts":[0,0.7,0.23076923076923078,0.001],"rank":5,"score":1}'
    )


def _numbers(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [n for item in value.values() for n in _numbers(item)]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    return [value] if type(value) in (int, float) else []


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_checked_numbers_skip_only_a_scan_that_cannot_matter(value: Any) -> None:
    # A caller may claim numbers_checked only when every number is plain; the
    # bytes are then still the reference bytes.
    if all(canonical.is_plain_number(n) for n in _numbers(value)):
        assert canonical_checked(value) == reference(value)


def canonical_checked(value: Any) -> bytes | type[Exception]:
    try:
        return canonical.dumps_json(value, numbers_checked=True)
    except Exception as exc:
        return type(exc)


@pytest.mark.parametrize(
    ("number", "plain"),
    [
        (0, True),
        (2**53 - 1, True),
        (-(2**53) + 1, True),
        (2**53, False),
        (0.5, True),
        (1e-4, True),
        (9.99e-5, False),
        (1.0, False),
        (-0.0, False),
        (1e16, False),
        (1.5e15, False),  # integral
        (1.5e15 + 0.5, True),
        (math.inf, False),
        (math.nan, False),
        (True, False),
        ("1", False),
    ],
)
def test_is_plain_number(number: object, plain: bool) -> None:
    assert canonical.is_plain_number(number) is plain


# -- the per-candidate writer -------------------------------------------------------

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
PLAIN = st.one_of(INTS, FLOATS).filter(canonical.is_plain_number)
STRING_FIELDS = (
    "kind",
    "name",
    "site",
    "cluster",
    "stable_id",
    "admission_state",
    "selection_tier",
)
BREAKDOWN_KEYS = ("locality", "queue_depth", "kv_cache", "prefix_cache", "latency", "cost")


@st.composite
def candidate_documents(draw: st.DrawFn) -> dict[str, Any]:
    """Overlay candidate documents of every §5 shape, with plain numbers only."""
    document: dict[str, Any] = {key: draw(TEXT) for key in STRING_FIELDS}
    document["fresh"] = draw(st.booleans())
    document["rank"] = draw(PLAIN)
    if draw(st.booleans()):
        breakdown = {key: draw(PLAIN) for key in (*BREAKDOWN_KEYS, "total")}
        document["score"] = breakdown["total"]
        document["score_breakdown"] = breakdown
    if draw(st.booleans()):
        document["credential"] = {
            "strategy": draw(TEXT),
            "secretRef": {"name": draw(TEXT), "namespace": draw(TEXT), "key": draw(TEXT)},
        }
    return document


def _candidate_text(document: dict[str, Any]) -> str | None:
    breakdown = document.get("score_breakdown")
    return canonical.canonical_candidate(
        document, None if breakdown is None else canonical.canonical_breakdown(breakdown)
    )


@settings(max_examples=300, deadline=None)
@given(candidate_documents())
def test_candidate_writer_matches_the_reference(document: dict[str, Any]) -> None:
    text = _candidate_text(document)
    assert text is not None
    assert text.encode("utf-8") == rfc8785.dumps(document)


@settings(max_examples=100, deadline=None)
@given(st.lists(candidate_documents(), max_size=4), TEXT, TEXT)
def test_digest_of_candidate_texts_is_the_reference_digest(
    documents: list[dict[str, Any]], network: str, local_site: str
) -> None:
    texts = [_candidate_text(d) for d in documents]
    assert all(t is not None for t in texts)
    content = {"candidates": documents, "local_site": local_site, "network": network}
    expected = hashlib.sha256(rfc8785.dumps(content)).hexdigest()
    assert canonical.digest_of_texts(network, local_site, texts) == expected  # type: ignore[arg-type]
    assert canonical.canonical_digest({**content, "generated_at": "x"}) == expected


@given(candidate_documents(), st.sampled_from(["extra", "fresh"]))
def test_candidate_writer_declines_what_it_does_not_know(
    document: dict[str, Any], change: str
) -> None:
    if change == "extra":
        document["extra"] = 1
    else:
        document["fresh"] = 1
    assert _candidate_text(document) is None
