"""Prometheus text expositions read into core metric families, in one pass where it is plain.

``prometheus_client``'s parser reads a line character by character in Python,
which made parsing the largest part of a provider or gateway scrape.
`read_families` reads the plain lines that nearly every exposition is made of
(a legacy name, labels without escapes or spaces, a value and an optional
timestamp, each one space apart; ``# HELP`` and ``# TYPE`` lines without
quotes or escapes) with one regular expression, and groups them into families
by the same rules as ``prometheus_client`` (``_total`` stripped from counters,
a sample outside the current family taken as an untyped family of its own).
Anything else in the text (an escape, a quote in a comment, a tab, a name in
braces, an odd type) hands the whole text to ``prometheus_client``, so a text
is read exactly as that parser reads it, or refused where it refuses.
"""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from grid.core.routing.metrics_mapping import MetricFamily, Sample
from grid.errors import GridError

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'(?!__)[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_SAMPLE = re.compile(rf"({_NAME})(?:\{{((?:{_LABEL}(?:,{_LABEL})*,?)?)\}})? ([^ ]+)(?: ([^ ]+))?")
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
_NAME_ONLY = re.compile(_NAME)
_NOT_PLAIN_COMMENT = re.compile(r'["\\\x1c-\x1f]|[^\x00-\x7f]')
"""A quote or an escape, a character ``str.split`` takes for a space and the full
parser does not, or any non-ASCII character."""
_TYPES = {"counter", "gauge", "summary", "histogram", "untyped"}
_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}


class _NotPlain(GridError):
    """A line the one-pass reading does not take; the whole text goes to the full parser."""


def _number(text: str) -> float:
    """A value as ``prometheus_client`` reads it (an int first, else a float)."""
    if "_" in text:
        raise _NotPlain
    try:
        return float(int(text))
    except ValueError:
        return float(text)


def _sample(line: str) -> Sample:
    match = _SAMPLE.fullmatch(line)
    if match is None:
        raise _NotPlain
    name, labels, value, timestamp = match.groups()
    try:
        parsed = _number(value)
        if timestamp is not None:
            _ = _number(timestamp) / 1000  # refused by the full parser if it fails
    except (ValueError, OverflowError) as exc:
        raise _NotPlain from exc
    pairs = dict(_LABEL_PAIR.findall(labels)) if labels else {}
    if labels and len(pairs) != labels.count('="'):
        raise _NotPlain  # a label named twice, which the full parser refuses
    return Sample(name, pairs, parsed)


class _Families:
    """The grouping state of ``prometheus_client``'s text parser."""

    def __init__(self) -> None:
        self.done: list[MetricFamily] = []
        self.name = ""
        self.type = "untyped"
        self.samples: list[Sample] = []
        self.allowed: tuple[str, ...] = ()

    def close(self) -> None:
        if self.name:
            self.done.append(_family(self.name, self.type, self.samples))

    def comment(self, line: str) -> None:
        if _NOT_PLAIN_COMMENT.search(line):
            raise _NotPlain
        parts = line.split(None, 3)
        if len(parts) < 2 or parts[1] not in ("HELP", "TYPE"):
            return
        if len(parts) < 3 or _NAME_ONLY.fullmatch(parts[2]) is None:
            raise _NotPlain
        candidate = parts[2]
        if parts[1] == "HELP":
            if candidate != self.name:
                self.close()
                self.name, self.type, self.samples = candidate, "untyped", []
                self.allowed = (candidate,)
            return
        if len(parts) < 4 or parts[3] not in _TYPES:
            raise _NotPlain
        if candidate != self.name:
            self.close()
            self.name, self.samples = candidate, []
        self.type = parts[3]
        self.allowed = tuple(self.name + s for s in _SUFFIXES.get(self.type, ("",)))

    def sample(self, sample: Sample) -> None:
        if sample.name in self.allowed:
            self.samples.append(sample)
            return
        self.close()
        self.name, self.type, self.samples, self.allowed = "", "untyped", [], ()
        self.done.append(_family(sample.name, "untyped", [sample]))


def _family(name: str, typ: str, samples: list[Sample]) -> MetricFamily:
    if typ == "counter":
        if name.endswith("_total"):
            name = name[:-6]
        else:
            samples = [Sample(s.name + "_total", s.labels, s.value) for s in samples]
    if not name:
        raise _NotPlain
    return MetricFamily(name, "unknown" if typ == "untyped" else typ, tuple(samples))


def _plain(text: str) -> list[MetricFamily]:
    families = _Families()
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            families.comment(line)
        else:
            families.sample(_sample(line))
    families.close()
    return families.done


def read_families(text: str) -> list[MetricFamily]:
    """The metric families of a Prometheus text exposition, as ``prometheus_client``
    reads them; ValueError (or another error of that parser) where it refuses the text."""
    try:
        return _plain(text)
    except _NotPlain:
        pass
    return [
        MetricFamily(
            family.name,
            family.type,
            tuple(Sample(s.name, dict(s.labels), float(s.value)) for s in family.samples),
        )
        for family in text_string_to_metric_families(text)
    ]
