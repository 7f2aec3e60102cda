"""The overlay verifier: an envelope or a bare overlay checked in §5's order.

`verify` answers ``accept``, ``accept_legacy`` or ``reject`` with a stable reason
code. Structure comes first (`grid.core.overlay.structure`), then the schema
version, the digest, the revision and the scope. Messages name fields, never
document values, so nothing from a hostile file is echoed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grid.core.overlay.digest import canonical_digest
from grid.core.overlay.envelope import Scope
from grid.core.overlay.structure import (
    ENVELOPE_KEYS,
    check_envelope_structure,
    check_overlay_structure,
)

ACCEPT = "accept"
ACCEPT_LEGACY = "accept_legacy"
REJECT = "reject"


@dataclass(frozen=True)
class Verdict:
    """The validator's answer: ``verdict``, a stable ``reason`` code, the revision.

    ``reason`` is ``None`` on acceptance. ``revision`` is the verified revision
    (for a bare overlay, its recomputed digest) and ``None`` on rejection.
    ``detail`` is a human sentence for logs; it never repeats document values
    beyond names.
    """

    verdict: str
    reason: str | None
    revision: str | None
    detail: str = ""

    def as_dict(self) -> dict[str, str | None]:
        """The printed form ``{"verdict", "reason", "revision"}``."""
        return {"verdict": self.verdict, "reason": self.reason, "revision": self.revision}

    @property
    def accepted(self) -> bool:
        """True for ``accept`` and ``accept_legacy``."""
        return self.verdict != REJECT


def _reject(reason: str, detail: str) -> Verdict:
    return Verdict(verdict=REJECT, reason=reason, revision=None, detail=detail)


def _is_supported_version(value: object) -> bool:
    """True for a ``1.x`` or ``1.x.y`` version string."""
    if not isinstance(value, str):
        return False
    parts = value.split(".")
    return (
        len(parts) in (2, 3)
        and parts[0] == "1"
        and all(p.isascii() and p.isdigit() for p in parts[1:])
    )


def _scope_problem(
    scope: Mapping[str, Any],
    overlay: Mapping[str, Any],
    expected: Mapping[str, str | None] | None,
) -> str | None:
    for key in ("network", "local_site"):
        if scope[key] != overlay[key]:
            return f"scope.{key} differs from overlay.{key}"
    for key, want in (expected or {}).items():
        if want is not None and scope.get(key) != want:
            return f"scope.{key} differs from the expected {key}"
    return None


def verify(
    document: object, expected_scope: Mapping[str, str | None] | Scope | None = None
) -> Verdict:
    """Validate an envelope (or a bare overlay) in §5's order.

    Reasons, in the order checked: ``malformed_structure``,
    ``missing_schema_version``, ``unsupported_schema_version``,
    ``digest_mismatch``, ``revision_digest_mismatch``, ``scope_mismatch``. A
    document without any envelope key is a bare overlay: ``accept_legacy`` when
    well formed. ``expected_scope`` keys left ``None`` are not compared.
    """
    expected = expected_scope.as_dict() if isinstance(expected_scope, Scope) else expected_scope
    if not isinstance(document, dict):
        return _reject("malformed_structure", "the document is not a JSON object")
    if not any(key in document for key in ENVELOPE_KEYS):
        problem = check_overlay_structure(document, "")
        if problem is not None:
            return _reject("malformed_structure", problem)
        legacy_digest = _digest(document)
        if legacy_digest is None:
            return _reject("malformed_structure", _UNREPRESENTABLE)
        return Verdict(ACCEPT_LEGACY, None, legacy_digest, "bare overlay")
    problem = check_envelope_structure(document)
    if problem is not None:
        return _reject("malformed_structure", problem)
    if "schema_version" not in document:
        return _reject("missing_schema_version", "the envelope has no schema_version")
    if not _is_supported_version(document["schema_version"]):
        return _reject("unsupported_schema_version", "only schema_version 1.x is supported")
    overlay = document["overlay"]
    digest = _digest(overlay)
    if digest is None:
        return _reject("malformed_structure", _UNREPRESENTABLE)
    if document["content_digest"]["value"] != digest:
        return _reject("digest_mismatch", "content_digest does not match the overlay")
    if document["revision"]["value"] != digest:
        return _reject("revision_digest_mismatch", "revision differs from content_digest")
    problem = _scope_problem(document["scope"], overlay, expected)
    if problem is not None:
        return _reject("scope_mismatch", problem)
    return Verdict(ACCEPT, None, digest, "envelope verified")


_UNREPRESENTABLE = "the overlay holds a number JSON cannot represent (NaN, infinity, too large)"


def _digest(overlay: dict[str, Any]) -> str | None:
    """The canonical digest, or None when the overlay has no JCS form.

    A decoder that accepts ``Infinity`` or ``NaN`` (Python's does by default)
    can hand over such a document; it is malformed, not a reason to raise.
    """
    try:
        return canonical_digest(overlay)
    except ValueError:  # rfc8785's CanonicalizationError, for one
        return None
