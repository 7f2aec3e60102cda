"""Strings that carry their own JSON text, so a store need not escape them again.

An operator replaces its overlay ConfigMap, whose two keys hold about a
megabyte of JSON text at a thousand providers, on every round that changed it,
and the SQLite store serialises the object into one JSON body: escaping every
quote of that megabyte cost as much as the two inserts that store it. The
overlay's render already keeps each candidate's text escaped as it is in a JSON
string (`grid.core.overlay.file_text.FileTexts`), so the writer hands the store
each value as an `EncodedText`: the string itself, plus the literal
``json.dumps`` writes for it. `dumps_object` writes the object with every
other value serialised as usual and those literals spliced in, which is byte
for byte ``json.dumps`` of the object.

An `EncodedText` is a ``str`` in every other respect (a store that does not
know it, or reads it back, sees the plain string), and it is immutable, so a
copy of JSON data may share it.
"""

from __future__ import annotations

import json
from typing import Any

_MARK = "\x00grid-encoded-{}\x00"
"""A stand-in value, never a ConfigMap's text; a collision falls back anyway."""


class EncodedText(str):
    """A string and its JSON string literal (``json.dumps(text)``: ASCII, quoted).

    The literal must be exactly that; the store writes it as given.
    """

    literal: str

    def __new__(cls, text: str, literal: str) -> EncodedText:
        """``text`` carrying ``literal``."""
        made = super().__new__(cls, text)
        made.literal = literal
        return made

    @staticmethod
    def of(text: str, literal: str | None) -> str:
        """``text`` carrying ``literal``, or ``text`` itself when there is none."""
        return text if literal is None else EncodedText(text, literal)

    def __reduce__(self) -> tuple[Any, ...]:
        return (EncodedText, (str(self), self.literal))

    def __deepcopy__(self, memo: dict[int, Any]) -> EncodedText:
        return self


def dumps_object(obj: dict[str, Any]) -> str:
    """``json.dumps(obj, sort_keys=True, separators=(",", ":"))``, with the ``data``
    values that are `EncodedText` written from their literals."""
    data = obj.get("data")
    if type(data) is not dict:
        return _dumps(obj)
    encoded = [k for k, v in data.items() if type(v) is EncodedText]
    if not encoded:
        return _dumps(obj)
    marks = {key: _MARK.format(i) for i, key in enumerate(encoded)}
    skeleton = _dumps({**obj, "data": {**data, **marks}})
    pieces: list[tuple[int, str, str]] = []
    for key, mark in marks.items():
        token = json.dumps(mark)
        at = skeleton.find(token)
        if at < 0 or skeleton.find(token, at + 1) >= 0:
            return _dumps(obj)
        pieces.append((at, token, data[key].literal))
    out: list[str] = []
    start = 0
    for at, token, literal in sorted(pieces):
        out += (skeleton[start:at], literal)
        start = at + len(token)
    out.append(skeleton[start:])
    return "".join(out)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))
