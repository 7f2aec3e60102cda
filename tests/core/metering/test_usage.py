"""Usage of answers and streams: the usage chunk is found at any chunk boundary and stripped."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from grid.core.metering.usage import StreamUsage, Usage, answer_usage, ask_for_usage, usage_of


def _event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


CHUNKS = [_event({"choices": [{"delta": {"content": w}}]}) for w in ("a", "b")]
USAGE = _event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
STREAM = b"".join([*CHUNKS, USAGE, b"data: [DONE]\n\n"])


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=8))
def test_the_usage_chunk_is_found_and_stripped_at_any_split(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    meter = StreamUsage(strip=True)
    out = b"".join(meter.feed(STREAM[a:b]) for a, b in itertools.pairwise(bounds))
    out += meter.finish()
    assert meter.usage == Usage(7, 3)
    assert out == STREAM.replace(USAGE, b"")


def test_a_client_that_asked_keeps_its_usage_chunk() -> None:
    meter = StreamUsage(strip=False)
    assert meter.feed(STREAM) == STREAM and meter.usage == Usage(7, 3)


def test_an_overlong_event_passes_through_untouched() -> None:
    meter = StreamUsage(strip=True, event_max_bytes=16)
    big = b"data: " + b"x" * 64
    assert meter.feed(big) == big
    assert meter.feed(USAGE) == USAGE


def test_ask_for_usage_only_adds_it_to_streams_that_did_not_ask() -> None:
    plain: dict[str, object] = {"stream": False}
    assert not ask_for_usage(plain) and "stream_options" not in plain
    asked: dict[str, object] = {"stream": True, "stream_options": {"include_usage": True}}
    assert not ask_for_usage(asked)
    bare: dict[str, object] = {"stream": True, "stream_options": {"x": 1}}
    assert ask_for_usage(bare)
    assert bare["stream_options"] == {"x": 1, "include_usage": True}


def test_usage_counts_must_be_sane() -> None:
    assert usage_of({"usage": {"prompt_tokens": 1, "completion_tokens": 2}}) == Usage(1, 2)
    for bad in ({"usage": {"prompt_tokens": -1}}, {"usage": {"prompt_tokens": True}}, [], {}):
        assert usage_of(bad) is None


def test_an_answers_usage_is_read_from_its_tail_or_from_the_whole_body() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 4}
    tail = json.dumps({"choices": [{"usage": {"prompt_tokens": 9}}], "usage": usage}).encode()
    assert answer_usage(tail) == Usage(3, 4)
    first = json.dumps({"usage": usage, "choices": [{"x": {"usage": 1}}]}).encode()
    assert answer_usage(first) == Usage(3, 4)
    nested_only = json.dumps({"choices": [{"usage": usage}]}).encode()
    assert answer_usage(nested_only) is None
    assert answer_usage(b'{"usage": {"prompt_tokens": 1') is None
    assert answer_usage(b"no usage here") is None


# -- the stream parser against a byte-by-byte reference, for every event size and chunking ----

USAGE_OTHER = _event({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
PIECES = st.sampled_from(
    [b"\n", b"\r", b"\r\n", b"data: ", b"data:", b"x", b'"usage"', b":c\n", USAGE, USAGE_OTHER]
)


def _reference(stream: bytes, strip: bool) -> tuple[bytes, Usage | None]:
    """One byte at a time: an event ends at an empty line (``\\n`` or ``\\r\\n`` alone)."""
    probe = StreamUsage(strip)
    out, event_start, line_start = [], 0, 0
    for i, byte in enumerate(stream):
        if byte != ord("\n"):
            continue
        if stream[line_start:i] in (b"", b"\r"):
            event = stream[event_start : i + 1]
            if not probe._consume(event):
                out.append(event)
            event_start = i + 1
        line_start = i + 1
    rest = stream[event_start:]
    if rest and not (b'"usage"' in rest and probe._consume(rest)):
        out.append(rest)
    return b"".join(out), probe.usage


def _sized(size: int) -> bytes:
    return b"data: " + b"y" * size + b"\n\n"


EVENTS = st.one_of(
    st.lists(PIECES, max_size=40).map(b"".join),
    st.lists(st.integers(0, 300).map(_sized), max_size=6).map(b"".join),
)


@given(EVENTS, EVENTS, st.lists(st.integers(min_value=0), max_size=12), st.booleans())
def test_any_chunking_gives_the_reference_split(
    head: bytes, tail: bytes, cuts: list[int], strip: bool
) -> None:
    stream = head + USAGE + tail
    bounds = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    meter = StreamUsage(strip)
    out = b"".join(meter.feed(stream[a:b]) for a, b in itertools.pairwise(bounds))
    out += meter.finish()
    assert (out, meter.usage) == _reference(stream, strip)


@given(st.integers(1, 3000), st.integers(1, 64))
def test_events_of_every_size_fed_in_any_step_all_arrive(size: int, step: int) -> None:
    stream = _sized(size) * 3 + USAGE + _sized(size // 2)
    meter = StreamUsage(True, event_max_bytes=8192)
    out = b"".join(meter.feed(stream[i : i + step]) for i in range(0, len(stream), step))
    out += meter.finish()
    assert out == stream.replace(USAGE, b"") and meter.usage == Usage(7, 3)
