"""Validation problems of Grid resources, each naming the field path it concerns.

Pydantic reports errors with a location tuple; this module turns them into
`FieldIssue`s with a dotted camelCase path (``spec.admission.excluded.queueDepth``,
``spec.models[0].name``) and a message that never echoes the offending value, so a
Secret's bytes cannot leak through an error. Cross-field checks raise `field_error`
from a model validator to attach a sub-path to the model's own location.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import pydantic
from pydantic_core import PydanticCustomError

from grid.core.resources.types import PATTERN_HINTS
from grid.errors import ValidationError

_FIELD_ERROR = "grid_field"
_VALIDATOR_TAG = re.compile(r"^function-(after|before|wrap|plain)\[.*\]$")
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class FieldIssue:
    """One invalid field: its dotted path and what is wrong with it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidResource(ValidationError):
    """A resource failed validation; `issues` lists every bad field, `path` the first."""

    def __init__(self, issues: Sequence[FieldIssue], *, resource: str = "") -> None:
        self.issues: tuple[FieldIssue, ...] = tuple(issues) or (FieldIssue("", "invalid"),)
        self.resource = resource
        prefix = f"{resource}: " if resource else ""
        super().__init__(
            prefix + "; ".join(str(issue) for issue in self.issues), path=self.issues[0].path
        )


_UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def printable(text: str) -> str:
    """``text`` with control and format characters escaped (``\\x1b``, ``\\u202e``).

    Names and paths from a user's file end up in terminal output; an escape sequence
    in ``metadata.name`` must show as text, not recolour or rewrite the terminal.
    """
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char == " " or unicodedata.category(char) not in _UNPRINTABLE_CATEGORIES:
            out.append(char)
        elif ord(char) < 0x100:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(f"\\u{ord(char):04x}" if ord(char) < 0x10000 else f"\\U{ord(char):08x}")
    return "".join(out)


def field_error(sub_path: str, message: str) -> PydanticCustomError:
    """An error for a model validator, located at the model's path plus `sub_path`."""
    return PydanticCustomError(_FIELD_ERROR, "{message}", {"field": sub_path, "message": message})


def join_path(base: str, loc: Sequence[int | str]) -> str:
    """Append a pydantic location to a dotted path (``[i]`` for indices, ``["k"]`` for odd keys)."""
    path = base
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            path = f"{path}.{part}" if path else part
        else:
            path += f'["{part}"]'
    return path


def issues_from(exc: pydantic.ValidationError, base: str = "") -> list[FieldIssue]:
    """Translate a pydantic error into field issues without ever quoting input values."""
    issues: list[FieldIssue] = []
    for err in exc.errors(include_input=False, include_url=False):
        loc = [p for p in err["loc"] if not _is_validator_tag(p)]
        # A mapping key that fails validation is located as (..., key, "[key]").
        key_error = bool(loc) and loc[-1] == "[key]"
        path = join_path(base, loc[:-1] if key_error else loc)
        ctx = err.get("ctx") or {}
        if err["type"] == _FIELD_ERROR:
            path = join_path(path, _split_sub_path(str(ctx["field"])))
            message = str(ctx["message"])
        elif err["type"] == "extra_forbidden":
            message = "unknown field (Grid rejects fields its schema does not define)"
        elif err["type"] == "missing":
            message = "required field is missing"
        elif err["type"] == "string_pattern_mismatch" and ctx.get("pattern") in PATTERN_HINTS:
            message = PATTERN_HINTS[str(ctx["pattern"])]
        elif err["type"] == "value_error":
            message = str(ctx.get("error", err["msg"]))
        else:
            message = err["msg"]
        issues.append(FieldIssue(path, f"key {message}" if key_error else message))
    return issues


def _is_validator_tag(part: int | str) -> bool:
    # Pydantic inserts tags such as "function-after[_check(), str]" for validators.
    return isinstance(part, str) and _VALIDATOR_TAG.match(part) is not None


def _split_sub_path(sub_path: str) -> list[int | str]:
    parts: list[int | str] = []
    for token in re.findall(r"[^.\[\]]+|\[\d+\]", sub_path):
        parts.append(int(token[1:-1]) if token.startswith("[") else token)
    return parts
