"""The text of the overlay files: ``grid-config.json`` and ``grid-overlay.json``.

Both files hold their document as ``json.dumps`` writes it with sorted keys,
compact separators and no ASCII escaping (`document_text`). For a 1,024-candidate
overlay that serialisation costs as much as the render, and a build already
made each candidate's canonical text for the digest
(`grid.core.overlay.document.BuiltOverlay.candidates_text`), which is what
``json.dumps`` writes for the candidate too. `overlay_text` and `envelope_text`
therefore serialise only the few fields around the candidates and splice that
text in; where a splice cannot be proven equal they serialise the whole document.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from grid.core.overlay.digest import json_literal_inside

_CANDIDATES_SLOT = '"candidates":[]'
_OVERLAY_SLOT = '"overlay":null'


def document_text(document: Mapping[str, Any]) -> str:
    """The file text of one JSON document: sorted keys, compact, UTF-8 as is.

    Compact output keeps the C encoder in play (``indent`` forces the pure-Python
    one), which matters when a 1,024-candidate overlay is rewritten every scrape.
    """
    return json.dumps(document, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _spliced(document: Mapping[str, Any], key: str, empty: Any, slot: str, inside: str) -> str:
    """`document_text` of ``document`` with ``document[key]`` written as ``inside``.

    The rest is serialised with ``key`` holding ``empty``, whose text is ``slot``;
    ``inside`` replaces it. A key's text holds its quotes unescaped only where it
    is a key, so a single occurrence is the field itself; otherwise the whole
    document is serialised.
    """
    around = _around(document, key, empty, slot)
    if around is None:
        return document_text(document)
    return f"{around[0]}{inside}{around[1]}"


def _around(document: Mapping[str, Any], key: str, empty: Any, slot: str) -> tuple[str, str] | None:
    """The text before and after ``slot`` in ``document`` with ``key`` holding ``empty``."""
    text = document_text({**document, key: empty})
    at = text.find(slot)
    if at < 0 or text.find(slot, at + 1) >= 0:
        return None
    return text[:at], text[at + len(slot) :]


def overlay_text(overlay: Mapping[str, Any], candidates_text: str | None) -> str:
    """`document_text` of the overlay, its candidates from ``candidates_text`` when given.

    ``candidates_text`` is the inside of the ``candidates`` array as a build
    wrote it (`grid.core.overlay.document.BuiltOverlay`); ``None`` serialises all.
    """
    if candidates_text is None:
        return document_text(overlay)
    inside = f'"candidates":[{candidates_text}]'
    return _spliced(overlay, "candidates", [], _CANDIDATES_SLOT, inside)


def envelope_text(envelope: Mapping[str, Any], overlay_file_text: str | None) -> str:
    """`document_text` of the envelope, its ``overlay`` from that overlay's `overlay_text`."""
    if overlay_file_text is None:
        return document_text(envelope)
    inside = f'"overlay":{overlay_file_text}'
    return _spliced(envelope, "overlay", None, _OVERLAY_SLOT, inside)


class FileTexts(NamedTuple):
    """The two files' text and, when known, each one's JSON string literal.

    ``config_literal`` and ``envelope_literal`` are ``json.dumps`` of the file
    text (ASCII escapes, quotes included), made from the candidates' kept
    literals instead of escaping a megabyte again, or ``None``.
    """

    config: str
    envelope: str
    config_literal: str | None = None
    envelope_literal: str | None = None


def file_texts(
    overlay: Mapping[str, Any],
    envelope: Mapping[str, Any],
    candidates_text: str | None,
    candidates_literal: str | None = None,
    end: str = "",
) -> FileTexts:
    """`overlay_text` and `envelope_text` (each followed by ``end``), with their literals.

    ``candidates_literal`` is ``candidates_text`` as the inside of a JSON string
    literal (`grid.core.overlay.document.BuiltOverlay.candidates_literal`). Each
    text and literal is written once from its pieces: a file is a megabyte.
    """
    config_around = None
    if candidates_text is not None:
        config_around = _around(overlay, "candidates", [], _CANDIDATES_SLOT)
    envelope_around = _around(envelope, "overlay", None, _OVERLAY_SLOT)
    if config_around is None or envelope_around is None:
        config = overlay_text(overlay, candidates_text)
        return FileTexts(f"{config}{end}", f"{envelope_text(envelope, config)}{end}")
    (c0, c1), (e0, e1) = config_around, envelope_around
    config = f'{c0}"candidates":[{candidates_text}]{c1}{end}'
    whole = f'{e0}"overlay":{c0}"candidates":[{candidates_text}]{c1}{e1}{end}'
    if candidates_literal is None:
        return FileTexts(config, whole)
    c0, c1, e0, e1, tail = map(json_literal_inside, (c0, c1, e0, e1, end))
    inside = f'{c0}\\"candidates\\":[{candidates_literal}]{c1}'
    return FileTexts(config, whole, f'"{inside}{tail}"', f'"{e0}\\"overlay\\":{inside}{e1}{tail}"')
