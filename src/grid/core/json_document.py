"""JSON documents from outside, decoded with a nesting bound and no non-standard numbers.

Signals documents and overlays arrive as files (``grid render --signals``, ``grid
overlay verify``) and over the network. The standard decoder already bounds its
own recursion, but a 200,000-deep array then surfaces as ``RecursionError`` and a
document nested a few thousand levels deep passes the decoder only to exhaust the
stack of whatever walks it next. `decode_json` gives every caller one outcome for
each: a value whose nesting is at most `JSON_DEPTH_MAX`, or `DocumentError` with
one sentence that names the limit, never a document value.
"""

from __future__ import annotations

import json
from typing import Any

from grid.errors import ValidationError

JSON_DEPTH_MAX = 64
"""Deepest nesting of arrays and objects accepted in a JSON document. Grid's own
documents nest at most six levels; 64 leaves room for producers' additive fields
while keeping every recursive walk of the value far from the interpreter's limit."""


class DocumentError(ValidationError):
    """A document that is not acceptable JSON: bad syntax, a non-finite number, too deep."""


class DocumentUnreadable(DocumentError):
    """A document no reader can take at all: nested past the bound, or not UTF-8 text."""


def _refuse_constant(name: str) -> Any:
    raise DocumentError(f"{name} is not valid JSON")


def depth_of(value: Any, limit: int) -> int:
    """Nesting depth of ``value`` (a scalar is 0), counting no further than ``limit + 1``.

    Iterative, so it never recurses however deep the value is.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if depth > limit:
            return depth
        stack.extend((child, depth) for child in children)
    return deepest


def decode_json(data: bytes | str, *, depth_max: int = JSON_DEPTH_MAX) -> Any:
    """Decode ``data`` as JSON, or raise `DocumentError` (never anything else)."""
    try:
        value = json.loads(data, parse_constant=_refuse_constant)
    except RecursionError as exc:
        raise DocumentUnreadable(f"nested deeper than {depth_max} levels") from exc
    except UnicodeDecodeError as exc:
        raise DocumentUnreadable(f"not UTF-8 text (byte offset {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise DocumentError(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except ValueError as exc:  # an integer too long for the decoder's digit limit
        raise DocumentError("not JSON: a number is too long") from exc
    if depth_of(value, depth_max) > depth_max:
        raise DocumentUnreadable(f"nested deeper than {depth_max} levels")
    return value
