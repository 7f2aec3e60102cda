"""Structural checks of the overlay and its envelope (the ``malformed_structure`` rule).

`grid.core.overlay.verify` runs these first. Each check returns ``None`` for a
well-formed value or one sentence naming the offending path. Messages name
fields and positions, never field values, so nothing from a hostile document
is echoed into logs.

The shapes are SPEC-DECISIONS §5 exactly: unknown keys are refused, numbers
must be finite (and booleans are not numbers), and a credential can only be a
``{strategy, secretRef: {name, namespace, key}}`` reference, so no token bytes
can ride along in a well-formed overlay.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from grid.core.overlay.ids import stable_id

CANDIDATES_MAX = 1024
"""Most candidates one overlay may carry (§5). Renderers keep the top-ranked
ones so they never produce an overlay this check refuses; the bound keeps the
document a gateway must parse and hold small."""

ENVELOPE_KEYS = frozenset(
    {"schema_version", "revision", "content_digest", "scope", "provenance", "overlay"}
)
OVERLAY_KEYS = frozenset({"network", "local_site", "candidates", "generated_at"})
CANDIDATE_REQUIRED = frozenset(
    {
        "kind",
        "name",
        "site",
        "cluster",
        "fresh",
        "stable_id",
        "admission_state",
        "selection_tier",
        "rank",
    }
)
CANDIDATE_OPTIONAL = frozenset({"score", "score_breakdown", "credential"})
BREAKDOWN_KEYS = frozenset(
    {"locality", "queue_depth", "kv_cache", "prefix_cache", "latency", "cost", "total"}
)
ADMISSION_STATES = frozenset({"new_and_existing", "existing_only"})
SELECTION_TIERS = frozenset({"same_site", "same_zone", "same_region", "cross_region"})
CREDENTIAL_STRATEGIES = frozenset({"bearer_token", "api_key"})
SCOPE_KEYS = frozenset({"network", "gateway", "namespace", "local_site"})
PROVENANCE_KEYS = frozenset(
    {
        "producer",
        "producer_version",
        "source_name",
        "source_uid",
        "source_generation",
        "rendered_at",
    }
)


def is_text(value: object) -> bool:
    """A non-empty string that encodes to UTF-8 (no lone surrogates)."""
    if not isinstance(value, str) or not value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def is_one_of(value: object, allowed: frozenset[str]) -> bool:
    """A string from ``allowed`` (safe for unhashable values such as lists)."""
    return isinstance(value, str) and value in allowed


def is_unit_number(value: object) -> bool:
    """A finite JSON number (not a boolean) in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and 0 <= value <= 1


def _keys_problem(
    value: object, path: str, required: frozenset[str], optional: frozenset[str] = frozenset()
) -> str | None:
    if not isinstance(value, dict):
        return f"{path or 'document'} must be an object"
    missing = sorted(required - value.keys())
    if missing:
        return f"{path or 'document'} lacks {', '.join(missing)}"
    unknown = [k for k in value if k not in required | optional]
    if unknown:
        return f"{path or 'document'} has unknown keys"
    return None


def _text_fields(value: Mapping[str, Any], path: str, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if not is_text(value[key]):
            return f"{path}.{key} must be a non-empty string"
    return None


def _credential_problem(credential: object, path: str) -> str | None:
    problem = _keys_problem(credential, path, frozenset({"strategy", "secretRef"}))
    if problem is not None:
        return problem
    assert isinstance(credential, dict)
    if not is_one_of(credential["strategy"], CREDENTIAL_STRATEGIES):
        return f"{path}.strategy must be bearer_token or api_key"
    ref_path = f"{path}.secretRef"
    ref = credential["secretRef"]
    problem = _keys_problem(ref, ref_path, frozenset({"name", "namespace", "key"}))
    if problem is not None:
        return problem
    assert isinstance(ref, dict)
    return _text_fields(ref, ref_path, ("name", "namespace", "key"))


def _score_problem(candidate: Mapping[str, Any], path: str) -> str | None:
    has_score, has_breakdown = "score" in candidate, "score_breakdown" in candidate
    if has_score != has_breakdown:
        return f"{path}: score and score_breakdown go together"
    if not has_score:
        return None
    if not is_unit_number(candidate["score"]):
        return f"{path}.score must be a number in [0, 1]"
    breakdown = candidate["score_breakdown"]
    problem = _keys_problem(breakdown, f"{path}.score_breakdown", BREAKDOWN_KEYS)
    if problem is not None:
        return problem
    assert isinstance(breakdown, dict)
    for key in sorted(BREAKDOWN_KEYS):
        if not is_unit_number(breakdown[key]):
            return f"{path}.score_breakdown.{key} must be a number in [0, 1]"
    if breakdown["total"] != candidate["score"]:
        return f"{path}.score_breakdown.total must equal score"
    return None


def check_candidate(candidate: object, index: int) -> str | None:
    """Problems of one candidate at position ``index``, or ``None``."""
    path = f"overlay.candidates[{index}]"
    problem = _keys_problem(candidate, path, CANDIDATE_REQUIRED, CANDIDATE_OPTIONAL)
    if problem is not None:
        return problem
    assert isinstance(candidate, dict)
    if candidate["kind"] != "inference_model":
        return f"{path}.kind must be inference_model"
    problem = _text_fields(candidate, path, ("name", "site", "cluster"))
    if problem is not None:
        return problem
    if not isinstance(candidate["fresh"], bool):
        return f"{path}.fresh must be a boolean"
    identity = (candidate["kind"], candidate["name"], candidate["site"], candidate["cluster"])
    if candidate["stable_id"] != stable_id(*identity):
        return f"{path}.stable_id does not match kind/name/site/cluster"
    if not is_one_of(candidate["admission_state"], ADMISSION_STATES):
        return f"{path}.admission_state must be new_and_existing or existing_only"
    if not is_one_of(candidate["selection_tier"], SELECTION_TIERS):
        return f"{path}.selection_tier is not a known tier"
    rank = candidate["rank"]
    if isinstance(rank, bool) or not isinstance(rank, int) or rank != index:
        return f"{path}.rank must equal its position {index}"
    problem = _score_problem(candidate, path)
    if problem is None and "credential" in candidate:
        problem = _credential_problem(candidate["credential"], f"{path}.credential")
    return problem


def check_overlay_structure(overlay: object, prefix: str = "overlay") -> str | None:
    """Problems of a ``grid-config.json`` document, or ``None``."""
    path = prefix or "overlay"
    problem = _keys_problem(overlay, path, OVERLAY_KEYS)
    if problem is not None:
        return problem
    assert isinstance(overlay, dict)
    problem = _text_fields(overlay, path, ("network", "local_site", "generated_at"))
    if problem is not None:
        return problem
    candidates = overlay["candidates"]
    if not isinstance(candidates, list):
        return f"{path}.candidates must be an array"
    if len(candidates) > CANDIDATES_MAX:
        return f"{path}.candidates holds more than {CANDIDATES_MAX} entries"
    seen: set[tuple[str, str, str, str]] = set()
    for index, candidate in enumerate(candidates):
        problem = check_candidate(candidate, index)
        if problem is not None:
            return problem
        identity = (candidate["kind"], candidate["name"], candidate["site"], candidate["cluster"])
        if identity in seen:
            return f"{path}.candidates[{index}] duplicates an earlier (kind, name, site, cluster)"
        seen.add(identity)
    return None


def _digest_problem(value: object, path: str, with_kind: bool) -> str | None:
    keys = frozenset({"algorithm", "value"} | ({"kind"} if with_kind else set()))
    problem = _keys_problem(value, path, keys)
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
    problem = _keys_problem(provenance, "provenance", PROVENANCE_KEYS)
    if problem is not None:
        return problem
    assert isinstance(provenance, dict)
    problem = _text_fields(
        provenance, "provenance", ("producer", "producer_version", "source_name", "rendered_at")
    )
    if problem is not None:
        return problem
    if provenance["source_uid"] is not None and not is_text(provenance["source_uid"]):
        return "provenance.source_uid must be a string or null"
    generation = provenance["source_generation"]
    if generation is not None and (isinstance(generation, bool) or not isinstance(generation, int)):
        return "provenance.source_generation must be an integer or null"
    return None


def check_envelope_structure(envelope: Mapping[str, Any]) -> str | None:
    """Problems of a ``grid-overlay.json`` envelope's shape, or ``None``.

    ``schema_version`` is not judged here: its absence and its value have their
    own reasons, checked after the structure.
    """
    unknown = [k for k in envelope if k not in ENVELOPE_KEYS]
    if unknown:
        return "the envelope has unknown keys"
    missing = sorted(ENVELOPE_KEYS - {"schema_version"} - envelope.keys())
    if missing:
        return f"the envelope lacks {', '.join(missing)}"
    problem = check_overlay_structure(envelope["overlay"])
    if problem is None:
        problem = _digest_problem(envelope["revision"], "revision", with_kind=True)
    if problem is None:
        problem = _digest_problem(envelope["content_digest"], "content_digest", with_kind=False)
    if problem is None:
        problem = _keys_problem(envelope["scope"], "scope", SCOPE_KEYS)
    if problem is None:
        problem = _text_fields(envelope["scope"], "scope", tuple(sorted(SCOPE_KEYS)))
    if problem is None:
        problem = _provenance_problem(envelope["provenance"])
    return problem
