"""What an overlay reader accepts: the structure rules of SPEC-DECISIONS §5.

A producer and a reader differ on purpose. Grid always writes every candidate
field; a reader (``grid overlay verify``, the gateway's overlay loader) accepts
what the upstream Praxis consumer accepts, so overlays from other producers and
from newer 1.x producers load:

* a candidate needs only ``kind`` (``inference_model``, ``mcp_tool`` or, §16,
  ``a2a_agent``),
  ``name``, ``site`` and ``cluster``; ``fresh`` defaults to true; ``stable_id``,
  ``admission_state``, ``selection_tier``, ``rank``, ``score`` and
  ``score_breakdown`` are type-checked when present;
* every value upstream writes is read: admission ``none`` (a candidate that
  serves no request, not even a bound session) and ``selection_tier: unknown``
  (upstream's tier for a missing region, which sorts after ``cross_region``);
* the §14 selection fields are optional and type-checked when present: the
  top-level ``selection_policy`` (one of `SELECTION_POLICIES`) and
  ``selection_load_aware`` (a boolean), and per candidate ``selection_group``
  (an integer >= 0), ``traffic_weight`` and ``capacity_weight`` (integers
  1..1000);
* unknown fields are allowed at every level, except inside ``credential`` and its
  ``secretRef`` (alias ``secret_ref``), so no token can ride along in a reference;
* strings are 1-256 characters and not blank.

`verify` runs these checks first (the ``malformed_structure`` reason). Each check
returns ``None`` for a well-formed value or one sentence naming the offending
path; messages name fields and positions, never values, so nothing from a hostile
document is echoed into logs. The verifier judges the document, not the
producer's arithmetic: a score that differs from its breakdown is the digest's
business.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from grid.core.vocabulary import (
    CAPACITY_WEIGHT_MAX,
    CAPACITY_WEIGHT_MIN,
    OVERLAY_ADMISSIONS,
    SIGNAL_NAMES,
    CandidateKind,
    SelectionPolicy,
    SelectionTier,
)

CANDIDATES_MAX = 1024
"""Most candidates one overlay may carry (§5). Renderers keep the top-ranked
ones so they never produce an overlay this check refuses; the bound keeps the
document a gateway must parse and hold small."""

TEXT_CHARS_MAX = 256
"""Longest identity or envelope string a reader accepts (§5), in characters."""

ENVELOPE_KEYS = frozenset(
    {"schema_version", "revision", "content_digest", "scope", "provenance", "overlay"}
)
"""Any of these at the top level makes the document an envelope (no legacy fallback)."""

CANDIDATE_KINDS = frozenset(kind.value for kind in CandidateKind)
IDENTITY_KEYS = ("kind", "name", "site", "cluster")
BREAKDOWN_KEYS = frozenset({*SIGNAL_NAMES, "total"})
ADMISSION_STATES = frozenset(OVERLAY_ADMISSIONS)
"""The core's admission states by their wire names, upstream's ``none`` included."""


def admission_state_problem(path: str) -> str:
    """The problem of a candidate at ``path`` whose ``admission_state`` is not one of
    `ADMISSION_STATES` (the verifier's and the gateway's reader's one wording)."""
    return f"{path}.admission_state must be new_and_existing, existing_only or none"


SELECTION_TIERS = frozenset(tier.value for tier in SelectionTier)
"""The core's tiers by their wire names, upstream's ``unknown`` included."""
SELECTION_POLICIES = frozenset(p.value for p in SelectionPolicy)
"""The overlay's ``selection_policy`` values (§14)."""
WEIGHT_FIELDS = ("traffic_weight", "capacity_weight")
"""Per-candidate weights (§14), integers in 1..1000 when present."""
CREDENTIAL_STRATEGIES = frozenset({"bearer_token", "api_key"})
SECRET_REF_KEYS = frozenset({"name", "namespace", "key"})
SCOPE_KEYS = ("gateway", "local_site", "namespace", "network")
PROVENANCE_TEXT_KEYS = ("producer", "producer_version", "source_name", "source_uid")

_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def is_text(value: object) -> bool:
    """A string of 1-256 characters, not blank, that encodes to UTF-8."""
    if not isinstance(value, str) or not value or len(value) > TEXT_CHARS_MAX:
        return False
    if value.isspace():
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def is_one_of(value: object, allowed: frozenset[str]) -> bool:
    """A string from ``allowed`` (safe for unhashable values such as lists)."""
    return isinstance(value, str) and value in allowed


def is_number(value: object) -> bool:
    """A finite JSON number (booleans are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)


def is_unit_number(value: object) -> bool:
    """A finite JSON number (not a boolean) in [0, 1]."""
    return is_number(value) and 0 <= value <= 1  # type: ignore[operator]


def _object_problem(value: object, path: str, required: tuple[str, ...]) -> str | None:
    if not isinstance(value, dict):
        return f"{path or 'document'} must be an object"
    missing = sorted(set(required) - value.keys())
    if missing:
        return f"{path or 'document'} lacks {', '.join(missing)}"
    return None


def _text_fields(value: Mapping[str, Any], path: str, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if key in value and not is_text(value[key]):
            return f"{path}.{key} must be a non-blank string of 1-{TEXT_CHARS_MAX} characters"
    return None


def secret_ref_of(credential: Mapping[str, Any]) -> Any:
    """A credential's ``secretRef``, accepting the ``secret_ref`` alias (§5)."""
    return credential["secretRef"] if "secretRef" in credential else credential.get("secret_ref")


def stable_id_of(candidate: Mapping[str, Any]) -> str:
    """A candidate's ``stable_id``, else the reader's ``"{kind}/{name}/{site}/{cluster}"``."""
    given = candidate.get("stable_id")
    if isinstance(given, str):
        return given
    return "/".join(str(candidate[key]) for key in IDENTITY_KEYS)


def _credential_problem(credential: object, path: str) -> str | None:
    if not isinstance(credential, dict):
        return f"{path} must be an object"
    ref_keys = [k for k in ("secretRef", "secret_ref") if k in credential]
    if "strategy" not in credential or len(ref_keys) != 1:
        return f"{path} needs strategy and exactly one of secretRef or secret_ref"
    if len(credential) != 2:
        return f"{path} has unknown keys"
    if not is_one_of(credential["strategy"], CREDENTIAL_STRATEGIES):
        return f"{path}.strategy must be bearer_token or api_key"
    ref_path = f"{path}.{ref_keys[0]}"
    ref = credential[ref_keys[0]]
    if not isinstance(ref, dict) or ref.keys() != SECRET_REF_KEYS:
        return f"{ref_path} must be exactly {{name, namespace, key}}"
    return _text_fields(ref, ref_path, ("name", "namespace", "key"))


def _score_problem(candidate: Mapping[str, Any], path: str) -> str | None:
    if "score" in candidate and not is_number(candidate["score"]):
        return f"{path}.score must be a number"
    if "score_breakdown" not in candidate:
        return None
    breakdown = candidate["score_breakdown"]
    if not isinstance(breakdown, dict):
        return f"{path}.score_breakdown must be an object"
    for key in sorted(BREAKDOWN_KEYS & breakdown.keys()):
        if not is_number(breakdown[key]):
            return f"{path}.score_breakdown.{key} must be a number"
    return None


def _optional_fields_problem(candidate: Mapping[str, Any], path: str) -> str | None:
    if "fresh" in candidate and not isinstance(candidate["fresh"], bool):
        return f"{path}.fresh must be a boolean"
    if "stable_id" in candidate and not is_text(candidate["stable_id"]):
        return f"{path}.stable_id must be a non-blank string of 1-{TEXT_CHARS_MAX} characters"
    if "admission_state" in candidate and not is_one_of(
        candidate["admission_state"], ADMISSION_STATES
    ):
        return admission_state_problem(path)
    if "selection_tier" in candidate and not is_one_of(
        candidate["selection_tier"], SELECTION_TIERS
    ):
        return f"{path}.selection_tier is not a known tier"
    if "rank" in candidate and not _is_int_in(candidate["rank"], 0, None):
        return f"{path}.rank must be a non-negative integer"
    problem = candidate_selection_problem(candidate, path)
    if problem is not None:
        return problem
    return _score_problem(candidate, path)


def candidate_selection_problem(candidate: Mapping[str, Any], path: str) -> str | None:
    """Problems of a candidate's §14 fields, or ``None``: ``selection_group`` an integer
    >= 0, ``traffic_weight`` and ``capacity_weight`` integers in 1..1000, each optional.

    The one owner of these rules: the verifier applies them to overlay candidates
    and the gateway to praxis.yaml's inline candidates.
    """
    if "selection_group" in candidate and not _is_int_in(candidate["selection_group"], 0, None):
        return f"{path}.selection_group must be a non-negative integer"
    for key in WEIGHT_FIELDS:
        if key in candidate and not _is_int_in(
            candidate[key], CAPACITY_WEIGHT_MIN, CAPACITY_WEIGHT_MAX
        ):
            return (
                f"{path}.{key} must be an integer in {CAPACITY_WEIGHT_MIN}..{CAPACITY_WEIGHT_MAX}"
            )
    return None


def _is_int_in(value: object, low: int, high: int | None) -> bool:
    """An integer (not a boolean) in ``low..high`` (no upper bound for ``None``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        return False
    return high is None or value <= high


def selection_policy_problem(overlay: Mapping[str, Any], path: str) -> str | None:
    """Problems of the top-level §14 fields, or ``None``: ``selection_policy`` one of
    `SELECTION_POLICIES` and ``selection_load_aware`` a boolean, each optional.

    The one owner of these rules: the verifier applies them to an overlay's top
    level and the gateway to praxis.yaml's ``intelligent_route`` filter.
    """
    if "selection_policy" in overlay and not is_one_of(
        overlay["selection_policy"], SELECTION_POLICIES
    ):
        return f"{path}.selection_policy must be one of {', '.join(sorted(SELECTION_POLICIES))}"
    if "selection_load_aware" in overlay and not isinstance(overlay["selection_load_aware"], bool):
        return f"{path}.selection_load_aware must be a boolean"
    return None


def check_candidate(candidate: object, index: int) -> str | None:
    """Problems of one candidate at position ``index``, or ``None``."""
    path = f"overlay.candidates[{index}]"
    problem = _object_problem(candidate, path, IDENTITY_KEYS)
    if problem is not None:
        return problem
    assert isinstance(candidate, dict)
    if not is_one_of(candidate["kind"], CANDIDATE_KINDS):
        return f"{path}.kind must be inference_model, mcp_tool or a2a_agent"
    problem = _text_fields(candidate, path, ("name", "site", "cluster"))
    if problem is None:
        problem = _optional_fields_problem(candidate, path)
    if problem is None and "credential" in candidate:
        problem = _credential_problem(candidate["credential"], f"{path}.credential")
    return problem


def check_overlay_structure(overlay: object, prefix: str = "overlay") -> str | None:
    """Problems of a ``grid-config.json`` document, or ``None``."""
    path = prefix or "overlay"
    problem = _object_problem(overlay, path, ("network", "local_site", "candidates"))
    if problem is not None:
        return problem
    assert isinstance(overlay, dict)
    problem = _text_fields(overlay, path, ("network", "local_site"))
    if problem is None and "generated_at" in overlay and not is_timestamp(overlay["generated_at"]):
        problem = f"{path}.generated_at must be an RFC 3339 timestamp"
    if problem is None:
        problem = selection_policy_problem(overlay, path)
    if problem is not None:
        return problem
    candidates = overlay["candidates"]
    if not isinstance(candidates, list):
        return f"{path}.candidates must be an array"
    if len(candidates) > CANDIDATES_MAX:
        return f"{path}.candidates holds more than {CANDIDATES_MAX} entries"
    seen: set[tuple[str, ...]] = set()
    for index, candidate in enumerate(candidates):
        problem = check_candidate(candidate, index)
        if problem is not None:
            return problem
        identity = tuple(candidate[key] for key in IDENTITY_KEYS)
        if identity in seen:
            return f"{path}.candidates[{index}] duplicates an earlier (kind, name, site, cluster)"
        seen.add(identity)
    return None


def is_timestamp(value: object) -> bool:
    """An RFC 3339 date-time string."""
    return isinstance(value, str) and len(value) <= 64 and _RFC3339.fullmatch(value) is not None


def _digest_problem(value: object, path: str, with_kind: bool) -> str | None:
    problem = _object_problem(
        value, path, ("algorithm", "value", *(("kind",) if with_kind else ()))
    )
    if problem is not None:
        return problem
    assert isinstance(value, dict)
    if with_kind and value["kind"] != "content_addressed":
        return f"{path}.kind must be content_addressed"
    if value["algorithm"] != "sha256":
        return f"{path}.algorithm must be sha256"
    if not is_text(value["value"]):
        return f"{path}.value must be a non-empty string"
    return None


def _provenance_problem(provenance: object) -> str | None:
    if not isinstance(provenance, dict):
        return "provenance must be an object"
    for key in PROVENANCE_TEXT_KEYS:
        value = provenance.get(key)
        if value is not None and not is_text(value):
            return f"provenance.{key} must be a non-blank string of 1-{TEXT_CHARS_MAX} characters"
    generation = provenance.get("source_generation")
    if generation is not None and (
        isinstance(generation, bool) or not isinstance(generation, int) or generation < 1
    ):
        return "provenance.source_generation must be a positive integer"
    rendered_at = provenance.get("rendered_at")
    if rendered_at is not None and not is_timestamp(rendered_at):
        return "provenance.rendered_at must be an RFC 3339 timestamp"
    return None


def check_envelope_structure(envelope: Mapping[str, Any]) -> str | None:
    """Problems of a ``grid-overlay.json`` envelope's shape, or ``None``.

    ``schema_version`` is not judged here: its absence and its value have their
    own reasons, checked after the structure. Unknown keys are allowed (§5).
    """
    missing = sorted({"revision", "content_digest", "scope", "overlay"} - envelope.keys())
    if missing:
        return f"the envelope lacks {', '.join(missing)}"
    problem = check_overlay_structure(envelope["overlay"])
    if problem is None:
        problem = _digest_problem(envelope["revision"], "revision", with_kind=True)
    if problem is None:
        problem = _digest_problem(envelope["content_digest"], "content_digest", with_kind=False)
    if problem is None:
        problem = _object_problem(envelope["scope"], "scope", SCOPE_KEYS)
    if problem is None:
        problem = _text_fields(envelope["scope"], "scope", SCOPE_KEYS)
    if problem is None and "provenance" in envelope:
        problem = _provenance_problem(envelope["provenance"])
    return problem
