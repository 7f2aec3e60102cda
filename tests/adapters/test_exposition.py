"""The one-pass exposition reading gives exactly what ``prometheus_client`` gives, or refuses."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from grid.adapters import exposition
from grid.adapters.exposition import read_families
from grid.core.routing.metrics_mapping import MetricFamily, Sample


def reference(text: str) -> list[MetricFamily] | type[BaseException]:
    """``prometheus_client``'s reading, or the type of error it raises."""
    try:
        return [
            MetricFamily(
                f.name,
                f.type,
                tuple(Sample(s.name, dict(s.labels), float(s.value)) for s in f.samples),
            )
            for f in text_string_to_metric_families(text)
        ]
    except Exception as exc:
        return type(exc)


def ours(text: str) -> list[MetricFamily] | type[BaseException]:
    try:
        return read_families(text)
    except Exception as exc:
        return type(exc)


def shape(read: list[MetricFamily] | type[BaseException]) -> object:
    """Comparable in full: label order kept, a NaN value equal to a NaN."""
    if not isinstance(read, list):
        return read
    return [
        (f.name, f.type, [(s.name, list(s.labels.items()), repr(s.value)) for s in f.samples])
        for f in read
    ]


NAMES = ["m", "m_total", "m_count", "m_sum", "m_bucket", "x:y", "_total", "__a", "1m", "m-x"]
LABEL_NAMES = ["a", "le", "model_name", "_b", "__name__", "__x", "a", "9"]
VALUES = ["1", "0", "-2", "1.5", "1e3", "NaN", "+Inf", "-Inf", "1_0", "x", "", "0x1", "1" * 400]
SPACES = [" ", " ", " ", "  ", "\t", "\r", "\x1c"]
TYPES = ["counter", "gauge", "histogram", "summary", "untyped", "info", "bogus", ""]


@st.composite
def label_value(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(["", "a", "b c", "x}y", "p,q", 'q\\"', "n\\n", "é", "s\\\\"]))


@st.composite
def sample_line(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(NAMES))
    labels = ""
    if draw(st.booleans()):
        pairs = [
            f'{draw(st.sampled_from(LABEL_NAMES))}="{draw(label_value())}"'
            for _ in range(draw(st.integers(0, 3)))
        ]
        sep = draw(st.sampled_from([",", ",", ", "]))
        labels = "{" + sep.join(pairs) + draw(st.sampled_from(["", "", ","])) + "}"
    line = name + labels + draw(st.sampled_from(SPACES)) + draw(st.sampled_from(VALUES))
    if draw(st.integers(0, 4)) == 0:
        line += draw(st.sampled_from(SPACES)) + draw(st.sampled_from(["1700000000000", "x", "1"]))
    return line


@st.composite
def comment_line(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["HELP", "TYPE", "TYPE", "other", ""]))
    name = draw(st.sampled_from([*NAMES, '"m"']))
    if kind == "TYPE":
        return f"# TYPE {name} {draw(st.sampled_from(TYPES))}"
    if kind == "HELP":
        return f"# HELP {name}" + draw(st.sampled_from(["", " help", ' a "q"', " a\\nb", " é"]))
    return draw(st.sampled_from(["#", "# a comment", "#HELP m", "# HELP"]))


@st.composite
def exposition_text(draw: st.DrawFn) -> str:
    lines = draw(
        st.lists(st.one_of(sample_line(), comment_line(), st.sampled_from(["", "  "])), max_size=12)
    )
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


@settings(max_examples=1500, deadline=None)
@given(exposition_text())
@example('# TYPE m counter\nm{a="1"} 2\nm_total{a="2"} 3\n')
@example('# TYPE m histogram\nm_bucket{le="+Inf"} 1\nm_count 1\nm_sum 2\nother 4\nm_count 5')
@example('m{a="1",a="2"} 1')
@example("m 1" + "0" * 400)
def test_the_one_pass_reading_is_prometheus_clients(text: str) -> None:
    assert shape(ours(text)) == shape(reference(text))


def test_a_plain_exposition_is_read_without_the_full_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(text: str) -> None:
        raise AssertionError("the full parser was used")

    monkeypatch.setattr(exposition, "text_string_to_metric_families", refuse)
    text = (
        "# HELP vllm:num_requests_waiting Waiting.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model_name="a",engine="0"} 3.0\n'
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        'vllm:prefix_cache_hits_total{model_name="a"} 12 1700000000000\n'
    )
    assert read_families(text) == [
        MetricFamily(
            "vllm:num_requests_waiting",
            "gauge",
            (Sample("vllm:num_requests_waiting", {"model_name": "a", "engine": "0"}, 3.0),),
        ),
        MetricFamily(
            "vllm:prefix_cache_hits",
            "counter",
            (Sample("vllm:prefix_cache_hits_total", {"model_name": "a"}, 12.0),),
        ),
    ]
