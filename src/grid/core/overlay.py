"""The rendered overlay (``grid-config.json``), its envelope and its validator.

The overlay is what Praxis' ``grid_route`` filter consumes: pre-sorted
candidates with admission state, locality tier, scores and credential
references (SPEC-DECISIONS §5). The envelope (``grid-overlay.json``) wraps it
with a content-addressed revision so that a gateway can verify what it loads
and a renderer can skip writes when nothing changed.

The revision and the content digest are the SHA-256 of the RFC 8785 (JCS)
canonical form of ``{candidates, local_site, network}``; ``generated_at`` and
provenance never enter it, so identical state gives identical revisions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from grid.core import canonical
from grid.core.ids import model_prefix, stable_id, stable_id_at
from grid.core.overlay_structure import (
    CANDIDATES_MAX,
    ENVELOPE_KEYS,
    check_envelope_structure,
    check_overlay_structure,
)
from grid.core.ranking import RankedCandidate
from grid.core.scoring import AdmissionState, ScoreBreakdown, SelectionTier

SCHEMA_VERSION = "1.0.0"
"""The envelope schema version this renderer writes."""

PRODUCER = "grid-operator"
"""The provenance producer name, fixed by §5 for every renderer."""

KIND_INFERENCE_MODEL = "inference_model"
"""The candidate kind for an inference model served by a provider."""

__all__ = [
    "CANDIDATES_MAX",
    "KIND_INFERENCE_MODEL",
    "PRODUCER",
    "SCHEMA_VERSION",
    "Provenance",
    "Scope",
    "Verdict",
    "build_envelope",
    "build_overlay",
    "build_overlay_and_envelope",
    "candidate_document",
    "canonical_digest",
    "format_timestamp",
    "stable_id",
    "verify",
]


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 UTC with a ``Z`` suffix and millisecond precision."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def json_number(value: float) -> float | int:
    """An integral float as an int (``1.0`` -> ``1``), the form JCS writes anyway.

    The number is the same JSON value either way; writing it as JCS does keeps
    the canonical serialisation on its fast path (`grid.core.canonical`).
    """
    return int(value) if value.is_integer() else value


_WIRE_NAMES: dict[StrEnum, str] = {
    member: member.value for enum in (AdmissionState, SelectionTier) for member in enum
}
"""Each state's wire name; a dict lookup is several times cheaper than ``.value``."""

_BREAKDOWN_KEYS = ("locality", "queue_depth", "kv_cache", "prefix_cache", "latency", "cost")


def _breakdown_document(breakdown: ScoreBreakdown) -> dict[str, float | int]:
    """The §5 ``score_breakdown`` with integral numbers written as integers."""
    document = {key: json_number(getattr(breakdown, key)) for key in _BREAKDOWN_KEYS}
    document["total"] = json_number(breakdown.total)
    return document


@dataclass
class _Shared:
    """What the candidates of one overlay share, converted once per overlay.

    ``breakdowns`` maps ``id(ScoreBreakdown)`` to its wire form (every model of
    one provider shares one breakdown object; the caller keeps them alive);
    ``prefixes`` maps ``(kind, name)`` to the model's stable-id hash prefix.
    """

    breakdowns: dict[int, dict[str, float | int]] = field(default_factory=dict)
    prefixes: dict[tuple[str, str], int] = field(default_factory=dict)
    plain_numbers: bool = True
    """Every number so far passes `canonical.is_plain_number`."""
    texts: list[str] | None = None
    """The canonical text of each candidate so far, when asked for (see `_canonical_candidate`);
    ``None`` once a candidate holds anything that writer does not know."""
    breakdown_texts: dict[int, str] = field(default_factory=dict)


def _candidate_document(ranked: RankedCandidate, shared: _Shared) -> dict[str, Any]:
    """`candidate_document`, reusing what ``shared`` already converted.

    Each candidate still gets its own dicts.
    """
    evaluation = ranked.evaluation
    candidate = evaluation.candidate
    kind, name, site, cluster = candidate.kind, candidate.name, candidate.site, candidate.cluster
    prefix = shared.prefixes.get((kind, name))
    if prefix is None:
        prefix = shared.prefixes[kind, name] = model_prefix(kind, name)
    document: dict[str, Any] = {
        "kind": kind,
        "name": name,
        "site": site,
        "cluster": cluster,
        "fresh": candidate.fresh,
        "stable_id": stable_id_at(prefix, site, cluster),
        "admission_state": _WIRE_NAMES[evaluation.admission],
        "selection_tier": _WIRE_NAMES[evaluation.tier],
        "rank": ranked.rank,
    }
    if not canonical.is_plain_number(ranked.rank):
        shared.plain_numbers = False
    breakdown = evaluation.breakdown
    if breakdown is not None:
        wire = shared.breakdowns.get(id(breakdown))
        if wire is None:
            wire = shared.breakdowns[id(breakdown)] = _breakdown_document(breakdown)
            if not all(map(canonical.is_plain_number, wire.values())):
                shared.plain_numbers = False
        document["score"] = wire["total"]
        document["score_breakdown"] = dict(wire)
    credential = candidate.credential
    if credential is not None:
        document["credential"] = {
            "strategy": credential.strategy,
            "secretRef": {
                "name": credential.secret_name,
                "namespace": credential.secret_namespace,
                "key": credential.secret_key,
            },
        }
    if shared.texts is not None:
        _add_canonical_text(document, breakdown, shared)
    return document


_encode = json.encoder.encode_basestring
"""The string escaper of ``json.dumps(ensure_ascii=False)``: exactly JCS's escapes."""


def _add_canonical_text(
    document: dict[str, Any], breakdown: ScoreBreakdown | None, shared: _Shared
) -> None:
    """Append the candidate's canonical text to ``shared.texts`` (or give up on them)."""
    assert shared.texts is not None
    breakdown_text = None
    if breakdown is not None:
        breakdown_text = shared.breakdown_texts.get(id(breakdown))
        if breakdown_text is None:
            breakdown_text = shared.breakdown_texts[id(breakdown)] = _canonical_breakdown(
                document["score_breakdown"]
            )
    try:
        text = _canonical_candidate(document, breakdown_text)
    except (TypeError, KeyError):
        text = None
    if text is None:
        shared.texts = None
    else:
        shared.texts.append(text)


def _canonical_breakdown(wire: Mapping[str, float | int]) -> str:
    """The JCS text of a ``score_breakdown`` whose numbers are all plain."""
    return (
        f'{{"cost":{wire["cost"]!r},"kv_cache":{wire["kv_cache"]!r},'
        f'"latency":{wire["latency"]!r},"locality":{wire["locality"]!r},'
        f'"prefix_cache":{wire["prefix_cache"]!r},"queue_depth":{wire["queue_depth"]!r},'
        f'"total":{wire["total"]!r}}}'
    )


def _canonical_candidate(document: Mapping[str, Any], breakdown_text: str | None) -> str | None:
    """The JCS text of a `_candidate_document`, keys in order, or ``None`` if unsure.

    What ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
    writes, which is the JCS text when every number is plain
    (`canonical.is_plain_number`, checked by the caller) and the text encodes
    as UTF-8 (also checked by the caller); the keys are fixed ASCII names.
    Anything else (another field, a non-boolean ``fresh``) answers ``None``.
    """
    fresh = document["fresh"]
    credential = document.get("credential")
    expected = 9 + (0 if breakdown_text is None else 2) + (0 if credential is None else 1)
    if (fresh is not True and fresh is not False) or len(document) != expected:
        return None
    enc = _encode
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
    return (
        f'{{"admission_state":{enc(document["admission_state"])},'
        f'"cluster":{enc(document["cluster"])}{secret},'
        f'"fresh":{"true" if fresh else "false"},"kind":{enc(document["kind"])},'
        f'"name":{enc(document["name"])},"rank":{document["rank"]!r}{score},'
        f'"selection_tier":{enc(document["selection_tier"])},"site":{enc(document["site"])},'
        f'"stable_id":{enc(document["stable_id"])}}}'
    )


def candidate_document(ranked: RankedCandidate) -> dict[str, Any]:
    """The §5 wire form of one ranked candidate (no field beyond §5's list)."""
    return _candidate_document(ranked, _Shared())


def build_overlay(
    network: str,
    local_site: str,
    ranked: Sequence[RankedCandidate],
    generated_at: datetime,
) -> dict[str, Any]:
    """``grid-config.json``: ``{network, local_site, candidates[], generated_at}``.

    ``ranked`` must already be in rank order 0..n-1 (as `scoring.rank` returns).
    """
    return _build_overlay(network, local_site, ranked, generated_at, _Shared())


def _build_overlay(
    network: str,
    local_site: str,
    ranked: Sequence[RankedCandidate],
    generated_at: datetime,
    shared: _Shared,
) -> dict[str, Any]:
    return {
        "network": network,
        "local_site": local_site,
        "candidates": [_candidate_document(r, shared) for r in ranked],
        "generated_at": format_timestamp(generated_at),
    }


def build_overlay_and_envelope(
    network: str,
    local_site: str,
    ranked: Sequence[RankedCandidate],
    generated_at: datetime,
    scope: Scope,
    provenance: Provenance,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`build_overlay`, then `build_envelope` of it: the same two documents.

    Every number in the overlay is made here and checked as it is made
    (`canonical.is_plain_number`), and each candidate's canonical text is
    written as its document is built, each shared score breakdown once. When
    every number is plain that text is the digest's input; otherwise (or for
    text that does not encode as UTF-8) the digest takes the full path of
    `canonical_digest`. Tests hold both to the `rfc8785` reference.
    """
    shared = _Shared(texts=[])
    overlay = _build_overlay(network, local_site, ranked, generated_at, shared)
    digest = _digest_of_texts(network, local_site, shared)
    if digest is None:
        digest = _digest(overlay, numbers_checked=shared.plain_numbers)
    return overlay, _envelope(overlay, scope, provenance, digest)


def _digest_of_texts(network: str, local_site: str, shared: _Shared) -> str | None:
    """The digest from the candidates' canonical texts, or ``None`` when unsure."""
    if shared.texts is None or not shared.plain_numbers:
        return None
    try:
        text = (
            f'{{"candidates":[{",".join(shared.texts)}],'
            f'"local_site":{_encode(local_site)},"network":{_encode(network)}}}'
        )
        data = text.encode("utf-8")
    except (TypeError, UnicodeEncodeError):
        return None
    return hashlib.sha256(data).hexdigest()


def canonical_digest(overlay: Mapping[str, Any]) -> str:
    """Lowercase-hex SHA-256 of the JCS form of ``{candidates, local_site, network}``.

    ``overlay`` is JSON data (string keys), as built by `build_overlay` or decoded
    from a file; the canonical bytes are exactly RFC 8785's (`grid.core.canonical`).
    """
    return _digest(overlay, numbers_checked=False)


def _digest(overlay: Mapping[str, Any], *, numbers_checked: bool) -> str:
    content = {
        "candidates": overlay["candidates"],
        "local_site": overlay["local_site"],
        "network": overlay["network"],
    }
    return hashlib.sha256(
        canonical.dumps_json(content, numbers_checked=numbers_checked)
    ).hexdigest()


@dataclass(frozen=True)
class Scope:
    """Which gateway an overlay is for (the envelope's ``scope``)."""

    network: str
    gateway: str
    namespace: str
    local_site: str

    def as_dict(self) -> dict[str, str]:
        """The wire form of ``scope``."""
        return {
            "network": self.network,
            "gateway": self.gateway,
            "namespace": self.namespace,
            "local_site": self.local_site,
        }


@dataclass(frozen=True)
class Provenance:
    """Where an overlay came from; never part of the revision.

    ``source_*`` describe the GridNetwork the overlay was rendered from; uid and
    generation are ``None`` when the source has none (a file rendered offline).
    """

    producer_version: str
    source_name: str
    source_uid: str | None
    source_generation: int | None
    rendered_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """The wire form of ``provenance``."""
        return {
            "producer": PRODUCER,
            "producer_version": self.producer_version,
            "source_name": self.source_name,
            "source_uid": self.source_uid,
            "source_generation": self.source_generation,
            "rendered_at": format_timestamp(self.rendered_at),
        }


def build_envelope(
    overlay: Mapping[str, Any], scope: Scope, provenance: Provenance
) -> dict[str, Any]:
    """``grid-overlay.json``: the overlay with revision, digest, scope and provenance."""
    return _envelope(overlay, scope, provenance, canonical_digest(overlay))


def _envelope(
    overlay: Mapping[str, Any], scope: Scope, provenance: Provenance, digest: str
) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "revision": {"kind": "content_addressed", "algorithm": "sha256", "value": digest},
        "content_digest": {"algorithm": "sha256", "value": digest},
        "scope": scope.as_dict(),
        "provenance": provenance.as_dict(),
        "overlay": dict(overlay),
    }


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
        return Verdict(ACCEPT_LEGACY, None, canonical_digest(document), "bare overlay")
    problem = check_envelope_structure(document)
    if problem is not None:
        return _reject("malformed_structure", problem)
    if "schema_version" not in document:
        return _reject("missing_schema_version", "the envelope has no schema_version")
    if not _is_supported_version(document["schema_version"]):
        return _reject("unsupported_schema_version", "only schema_version 1.x is supported")
    overlay = document["overlay"]
    digest = canonical_digest(overlay)
    if document["content_digest"]["value"] != digest:
        return _reject("digest_mismatch", "content_digest does not match the overlay")
    if document["revision"]["value"] != digest:
        return _reject("revision_digest_mismatch", "revision differs from content_digest")
    problem = _scope_problem(document["scope"], overlay, expected)
    if problem is not None:
        return _reject("scope_mismatch", problem)
    return Verdict(ACCEPT, None, digest, "envelope verified")
