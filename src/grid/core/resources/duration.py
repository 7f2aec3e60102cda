"""Durations as Grid's CRDs spell them: strings such as ``5s``, ``500ms`` or ``1m30s``.

Kubernetes resources carry durations as strings (SPEC-DECISIONS §2), in the same
shape Go's ``time.ParseDuration`` accepts for the units Grid needs: ``ms``, ``s``,
``m`` and ``h``, optionally fractional and concatenated (``1h30m``). This module is
the one parser, so the CRD pattern, the model validator and every runtime reader
agree on what a duration means.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
"""RE2-compatible pattern of a duration string (also used in the CRD schema)."""

_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_WHOLE = re.compile(DURATION_PATTERN)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

DURATION_MAX_LENGTH = 32
"""Longest accepted duration string; bounds the parser's work on untrusted input."""


def parse_duration(text: str) -> float:
    """Parse a duration string such as ``"5s"``, ``"500ms"`` or ``"1m30s"`` into seconds.

    Raises ``ValueError`` (naming the expected shape, not echoing long input) when the
    text is not a positive duration.
    """
    if not isinstance(text, str) or len(text) > DURATION_MAX_LENGTH or not _WHOLE.match(text):
        raise ValueError("must be a duration such as '5s', '500ms' or '1m30s' (units ms, s, m, h)")
    seconds = sum(float(num) * _UNIT_SECONDS[unit] for num, unit in _PART.findall(text))
    if seconds <= 0:
        raise ValueError("must be a positive duration")
    return seconds


def _check_duration(text: str) -> str:
    parse_duration(text)
    return text


Duration = Annotated[
    str,
    AfterValidator(_check_duration),
    # The pattern is enforced by `parse_duration` (with a clearer message) and
    # published in the JSON schema so the CRD rejects the same strings.
    Field(json_schema_extra={"pattern": DURATION_PATTERN, "maxLength": DURATION_MAX_LENGTH}),
]
"""A positive duration string; read its value with `parse_duration`."""
