"""The overlay digest: RFC 8785 (JCS) canonical JSON, reference and fast writers, and SHA-256.

The overlay revision is the SHA-256 of the JCS form of the overlay content, so
every renderer and verifier must produce byte-identical canonical JSON. The
`rfc8785` library is the reference implementation; it is pure Python and about
ten times slower than the C-accelerated `json` module, which dominates the cost
of rendering a large overlay.

For the documents Grid writes, the standard library already produces JCS bytes
once three differences are ruled out:

* Numbers: JCS prints numbers as ECMAScript does. Python's ``repr`` of a float
  uses the same shortest round-trip digits and the same plain notation for
  ``1e-4 <= |x| < 1e16``, but prints integral floats as ``1.0`` (JCS: ``1``).
  Integral floats up to 2^53-1 are therefore written as integers. Any other
  integral float, any float outside that range, any integer beyond 2^53-1 in
  magnitude and any non-finite number go to the reference implementation.
* Key order: JCS sorts by UTF-16 code units, Python by code points. They agree
  unless a key holds a character at or above U+D800, so only such keys fall
  back.
* Strings: ``json.dumps(ensure_ascii=False)`` escapes exactly what JCS escapes
  (``"``, ``\\``, and U+0000..U+001F with the short forms and lowercase
  ``\\u00xx``). A string that cannot be encoded as UTF-8 falls back.

Whenever a value is outside the fast path the whole document is serialised by
`rfc8785.dumps`, so the output (or the error) is always the reference one.
A differential test over generated documents holds the two paths equal.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import rfc8785

from grid.errors import GridError

_INT_MAX = 2**53 - 1
_PLAIN_FLOAT_MIN = 1e-4
_PLAIN_FLOAT_MAX = 1e16
_SURROGATE_START = "\ud800"


class _NeedsReference(GridError):
    """A value the fast path cannot prove identical; use the reference encoder."""


def _prepare(value: Any) -> Any:
    """A copy of ``value`` whose stdlib JSON form is its JCS form, or raise."""
    if isinstance(value, str) or value is None or value is True or value is False:
        return value
    if isinstance(value, float):
        if value.is_integer():
            # Beyond 2^53 the exact integer and the shortest digits can differ.
            if abs(value) <= _INT_MAX:
                return int(value)
            raise _NeedsReference
        if math.isfinite(value) and _PLAIN_FLOAT_MIN <= abs(value) < _PLAIN_FLOAT_MAX:
            return value
        raise _NeedsReference
    if isinstance(value, int):
        if type(value) is int and abs(value) <= _INT_MAX:
            return value
        raise _NeedsReference
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str) or (key and max(key) >= _SURROGATE_START):
                raise _NeedsReference
            out[key] = _prepare(item)
        return out
    if isinstance(value, list | tuple):
        return [_prepare(item) for item in value]
    raise _NeedsReference


# Output the standard library writes differently from JCS, or might: an integral
# float ("1.0"), an exponent ("1e-05"; Python writes it in lower case), an integer
# of 16 or more digits (possibly beyond 2^53; in compact JSON a number follows
# ":", "," or "[") and any character at or above U+E000 (where code point order
# and UTF-16 order of keys part ways; surrogates cannot be encoded at all).
# Matches inside strings are harmless: they only send the document to the
# reference path. Each pattern starts with a literal, which the regular
# expression engine finds with a fast substring search (a leading character
# class is tested at every position, several times slower), so the scans stay
# a small fraction of the serialisation itself.
_INTEGRAL_FLOAT = re.compile(r"\.0(?![0-9])")
_EXPONENT = re.compile(r"e[-+][0-9]")
_LONG_INTEGERS = tuple(re.compile(rf"{lead}-?[0-9]{{16}}") for lead in (":", ",", r"\["))
_LATE_CHARACTER = re.compile("[\ue000-\uffff\U00010000-\U0010ffff]")
_SCANS = (_INTEGRAL_FLOAT, _EXPONENT, *_LONG_INTEGERS)


def is_plain_number(value: object) -> bool:
    """True for a number the standard library writes exactly as JCS does.

    That is an ``int`` within ±(2^53-1), or a finite, non-integral ``float``
    with ``1e-4 <= |x| < 1e16`` (see the module docstring).
    """
    if type(value) is int:
        return abs(value) <= _INT_MAX
    if type(value) is float:
        return (
            not value.is_integer()
            and math.isfinite(value)
            and _PLAIN_FLOAT_MIN <= abs(value) < _PLAIN_FLOAT_MAX
        )
    return False


def _suspect(text: str, numbers_checked: bool = False) -> bool:
    """True when ``text`` might not be the JCS form of what it encodes."""
    if text[:1] in "-0123456789":  # a bare top-level number
        return True
    if not text.isascii() and _LATE_CHARACTER.search(text):
        return True
    if numbers_checked:
        return False
    return any(p.search(text) for p in _SCANS)


def dumps_json(value: Any, *, numbers_checked: bool = False) -> bytes:
    """`dumps` for JSON data: every mapping key is already a string.

    This is the overlay's case (documents built by Grid or decoded from JSON).
    The standard library serialises the document in C, and a scan of its output
    sends anything that might differ from JCS to the reference implementation,
    so the bytes are always the reference bytes. Unlike `dumps`, a mapping with
    non-string keys is not refused here; callers pass JSON data only.

    ``numbers_checked`` is for a caller that built the document and checked
    every number in it with `is_plain_number`: the scan for numbers is skipped
    (strings and keys are still checked). A wrong claim gives wrong bytes.
    """
    try:
        # No circular-reference bookkeeping: a cycle ends in RecursionError
        # instead of ValueError, and either way the reference decides.
        text = json.dumps(
            value,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            check_circular=False,
        )
    except (TypeError, ValueError, RecursionError):
        return rfc8785.dumps(value)
    if _suspect(text, numbers_checked):
        return rfc8785.dumps(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return rfc8785.dumps(value)


def dumps(value: Any) -> bytes:
    """The RFC 8785 canonical serialisation of ``value`` as UTF-8 bytes."""
    try:
        prepared = _prepare(value)
        text = json.dumps(
            prepared, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        return text.encode("utf-8")
    except (_NeedsReference, UnicodeEncodeError, ValueError, RecursionError):
        return rfc8785.dumps(value)


encode_string = json.encoder.encode_basestring
"""The string escaper of ``json.dumps(ensure_ascii=False)``: exactly JCS's escapes."""

_encode_ascii = json.encoder.encode_basestring_ascii


def json_literal_inside(text: str) -> str:
    """``json.dumps(text)`` without its quotes: what a JSON document that holds ``text``
    as a string writes for it (ASCII, every other character escaped).

    Escaping goes character by character, so the inside of the literal of a
    concatenation is the concatenation of the insides: a writer that keeps the
    pieces of a text (`grid.core.overlay.candidate_cache`) escapes only new ones.
    """
    return _encode_ascii(text)[1:-1]


def canonical_breakdown(wire: Mapping[str, float | int]) -> str:
    """The JCS text of a ``score_breakdown`` whose numbers are all plain."""
    return (
        f'{{"cost":{wire["cost"]!r},"kv_cache":{wire["kv_cache"]!r},'
        f'"latency":{wire["latency"]!r},"locality":{wire["locality"]!r},'
        f'"prefix_cache":{wire["prefix_cache"]!r},"queue_depth":{wire["queue_depth"]!r},'
        f'"total":{wire["total"]!r}}}'
    )


_SELECTION_INTS = ("capacity_weight", "selection_group", "traffic_weight")
"""The §14 integer fields a Grid candidate may carry, each written at most once."""


def canonical_candidate(document: Mapping[str, Any], breakdown_text: str | None) -> str | None:
    """The JCS text of one overlay candidate document, keys in order, or ``None`` if unsure.

    What ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
    writes, which is the JCS text when every number is plain
    (`is_plain_number`, checked by the caller) and the text encodes
    as UTF-8 (also checked by the caller); the keys are fixed ASCII names.
    Anything else (another field, a non-boolean ``fresh``, a §14 field that is
    not an ``int``) answers ``None``.
    """
    parts = candidate_text_parts(document, breakdown_text)
    if parts is None:
        return None
    head, middle, tail = parts
    group = document.get("selection_group", "")
    return f"{head}{document['rank']!r}{middle}{group}{tail}"


CandidateTextParts = tuple[str, str, str]
"""A candidate's canonical text around its ``rank`` and ``selection_group`` values."""


def candidate_text_parts(
    document: Mapping[str, Any], breakdown_text: str | None
) -> CandidateTextParts | None:
    """`canonical_candidate` cut around the two values a re-ranking moves.

    ``(head, middle, tail)``: the text is ``head``, the ``rank``, ``middle``, the
    ``selection_group`` (only when the document has one) and ``tail``, so a
    candidate whose rank changed is written again without writing anything else.
    ``None`` exactly when `canonical_candidate` is.
    """
    fresh = document["fresh"]
    credential = document.get("credential")
    ints = {key: document[key] for key in _SELECTION_INTS if key in document}
    if any(type(value) is not int for value in ints.values()):
        return None
    expected = (
        9 + (0 if breakdown_text is None else 2) + (0 if credential is None else 1) + len(ints)
    )
    if (fresh is not True and fresh is not False) or len(document) != expected:
        return None
    enc = encode_string
    score = ""
    if breakdown_text is not None:
        score = f',"score":{document["score"]!r},"score_breakdown":{breakdown_text}'
    secret = ""
    if credential is not None:
        ref = credential["secretRef"]
        if len(credential) != 2 or len(ref) != 3:
            return None
        secret = (
            f',"credential":{{"secretRef":{{"key":{enc(ref["key"])},"name":{enc(ref["name"])},'
            f'"namespace":{enc(ref["namespace"])}}},"strategy":{enc(credential["strategy"])}}}'
        )
    capacity = f',"capacity_weight":{ints["capacity_weight"]}' if "capacity_weight" in ints else ""
    group = ',"selection_group":' if "selection_group" in ints else ""
    traffic = f',"traffic_weight":{ints["traffic_weight"]}' if "traffic_weight" in ints else ""
    head = (
        f'{{"admission_state":{enc(document["admission_state"])}{capacity},'
        f'"cluster":{enc(document["cluster"])}{secret},'
        f'"fresh":{"true" if fresh else "false"},"kind":{enc(document["kind"])},'
        f'"name":{enc(document["name"])},"rank":'
    )
    tail = (
        f',"selection_tier":{enc(document["selection_tier"])},"site":{enc(document["site"])},'
        f'"stable_id":{enc(document["stable_id"])}{traffic}}}'
    )
    return head, f"{score}{group}", tail


def digest_of_texts(
    network: str,
    local_site: str,
    texts: Sequence[str],
    selection_policy: str | None = None,
    selection_load_aware: bool | None = None,
) -> str | None:
    """The digest from the candidates' canonical texts (`canonical_candidate`), or ``None``.

    ``selection_policy`` and ``selection_load_aware`` are the overlay's §14
    top-level fields, covered when present (absent, the digest is the one of
    ``{candidates, local_site, network}``). ``None`` when the text does not
    encode as UTF-8; the caller then takes the full path.
    """
    return digest_of_joined(
        network, local_site, ",".join(texts), selection_policy, selection_load_aware
    )


def digest_of_joined(
    network: str,
    local_site: str,
    joined: str,
    selection_policy: str | None = None,
    selection_load_aware: bool | None = None,
) -> str | None:
    """`digest_of_texts` of texts already joined with commas (the ``candidates`` array's
    inside), so the overlay's file text (`grid.core.overlay.file_text`) can reuse them."""
    tail = ""
    if selection_load_aware is not None:
        if selection_load_aware is not True and selection_load_aware is not False:
            return None
        tail += f',"selection_load_aware":{"true" if selection_load_aware else "false"}'
    try:
        if selection_policy is not None:
            tail += f',"selection_policy":{encode_string(selection_policy)}'
        text = (
            f'{{"candidates":[{joined}],'
            f'"local_site":{encode_string(local_site)},"network":{encode_string(network)}{tail}}}'
        )
        data = text.encode("utf-8")
    except (TypeError, UnicodeEncodeError):
        return None
    return hashlib.sha256(data).hexdigest()


def canonical_digest(overlay: Mapping[str, Any]) -> str:
    """Lowercase-hex SHA-256 of the JCS form of ``{candidates, local_site, network}``.

    ``overlay`` is JSON data (string keys), as built by `build_overlay` or decoded
    from a file; the canonical bytes are exactly RFC 8785's (`dumps_json`). The
    digest covers the raw overlay object as received, less ``generated_at``: for
    what Grid writes that is ``{candidates, local_site, network}`` plus the §14
    ``selection_policy`` and ``selection_load_aware`` when present (an overlay
    without them keeps its old digest), and a newer producer's additive fields
    stay covered (SPEC-DECISIONS §5).
    """
    return digest(overlay, numbers_checked=False)


def digest(overlay: Mapping[str, Any], *, numbers_checked: bool) -> str:
    """`canonical_digest`; ``numbers_checked`` as `dumps_json` takes it."""
    content = {key: value for key, value in overlay.items() if key != "generated_at"}
    return hashlib.sha256(dumps_json(content, numbers_checked=numbers_checked)).hexdigest()
