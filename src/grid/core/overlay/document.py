"""The rendered overlay (``grid-config.json``): ranked candidates in their wire form.

The overlay is what Praxis' ``grid_route`` filter consumes: pre-sorted
candidates with admission state, locality tier, scores and credential
references (SPEC-DECISIONS §5). A render writes many candidates that share
scores and model names, so what they share is converted once per overlay, and
each candidate's canonical text is written as its document is built, so the
digest (`grid.core.overlay.digest`) need not serialise the document again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, assert_never

from grid.core.overlay.digest import (
    canonical_breakdown,
    canonical_candidate,
    digest,
    digest_of_joined,
    is_plain_number,
)
from grid.core.overlay.envelope import Provenance, Scope, envelope_with_digest, format_timestamp
from grid.core.overlay.ids import model_prefix, stable_id_at
from grid.core.vocabulary import (
    SIGNAL_NAMES,
    AdmissionState,
    CandidateKind,
    RouteIdentity,
    ScoreBreakdown,
    SelectionMode,
    SelectionPolicy,
    SelectionTier,
)

if TYPE_CHECKING:
    from grid.core.overlay.candidate_cache import CandidateCache

KIND_INFERENCE_MODEL = CandidateKind.INFERENCE_MODEL.value
"""The candidate kind for an inference model served by a provider."""


class Credential(Protocol):
    """What the overlay writes of a credential reference (never token bytes)."""

    @property
    def strategy(self) -> str: ...
    @property
    def secret_name(self) -> str: ...
    @property
    def secret_namespace(self) -> str: ...
    @property
    def secret_key(self) -> str: ...


class Routed(RouteIdentity, Protocol):
    """What the overlay writes of the candidate itself (routing's `CandidateInput` fits)."""

    @property
    def credential(self) -> Credential | None: ...
    @property
    def capacity_weight(self) -> int: ...


class Judged(Protocol):
    """What the overlay writes of the engine's verdict (routing's `Evaluation` fits)."""

    @property
    def candidate(self) -> Routed: ...
    @property
    def admission(self) -> AdmissionState: ...
    @property
    def tier(self) -> SelectionTier: ...
    @property
    def breakdown(self) -> ScoreBreakdown | None: ...


class Ranked(Protocol):
    """One candidate in rank order, as the overlay writes it (routing's `Ranked`).

    The overlay is below routing in the core's layers: it names what it reads
    of a ranked candidate instead of importing the pipeline that ranks.
    """

    @property
    def evaluation(self) -> Judged: ...
    @property
    def rank(self) -> int: ...


TRAFFIC_WEIGHT = "traffic_weight"
CAPACITY_WEIGHT = "capacity_weight"


@dataclass(frozen=True)
class Selection:
    """The §14 selection fields of one overlay: its policy and each candidate's group.

    ``groups`` holds each candidate's ``selection_group`` in overlay order;
    ``weight_field`` names the per-candidate weight written (the provider's
    ``capacityWeight``): ``traffic_weight`` under ``weighted_random``,
    ``capacity_weight`` when ``load_aware`` (``leastLoaded``), else none.
    """

    policy: SelectionPolicy
    load_aware: bool
    groups: Sequence[int]
    weight_field: str | None

    @classmethod
    def for_mode(cls, mode: SelectionMode, groups: Sequence[int]) -> Selection:
        """What the overlay writes for ``selectionPolicy.mode`` (§14).

        ``leastLoaded`` is written as ``random`` plus ``selection_load_aware``,
        so a consumer that does not know it picks at random within the group.
        """
        match mode:
            case SelectionMode.DETERMINISTIC:
                return cls(SelectionPolicy.DETERMINISTIC, False, groups, None)
            case SelectionMode.ROUND_ROBIN:
                return cls(SelectionPolicy.ROUND_ROBIN, False, groups, None)
            case SelectionMode.RANDOM:
                return cls(SelectionPolicy.RANDOM, False, groups, None)
            case SelectionMode.WEIGHTED_RANDOM:
                return cls(SelectionPolicy.WEIGHTED_RANDOM, False, groups, TRAFFIC_WEIGHT)
            case SelectionMode.LEAST_LOADED:
                return cls(SelectionPolicy.RANDOM, True, groups, CAPACITY_WEIGHT)
            case _:
                assert_never(mode)


def json_number(value: float) -> float | int:
    """An integral float as an int (``1.0`` -> ``1``), the form JCS writes anyway.

    The number is the same JSON value either way; writing it as JCS does keeps
    the canonical serialisation on its fast path (`grid.core.overlay.digest`).
    """
    return int(value) if value.is_integer() else value


_WIRE_NAMES: dict[StrEnum, str] = {
    member: member.value for enum in (AdmissionState, SelectionTier) for member in enum
}
"""Each state's wire name; a dict lookup is several times cheaper than ``.value``."""


def _breakdown_document(breakdown: ScoreBreakdown) -> dict[str, float | int]:
    """The §5 ``score_breakdown`` with integral numbers written as integers."""
    document = {key: json_number(getattr(breakdown, key)) for key in SIGNAL_NAMES}
    document["total"] = json_number(breakdown.total)
    return document


@dataclass
class SharedWire:
    """What the candidates of one overlay share, converted once per overlay.

    ``breakdowns`` maps a `ScoreBreakdown` to its wire form (every model of one
    provider has the same breakdown, so each is converted once);
    ``prefixes`` maps ``(kind, name)`` to the model's stable-id hash prefix.
    """

    breakdowns: dict[ScoreBreakdown, dict[str, float | int]] = field(default_factory=dict)
    prefixes: dict[tuple[str, str], int] = field(default_factory=dict)
    plain_numbers: bool = True
    """Every number so far passes `is_plain_number`."""
    texts: list[str] | None = None
    """The canonical text of each candidate so far, when asked for (see `canonical_candidate`);
    ``None`` once a candidate holds anything that writer does not know."""
    breakdown_texts: dict[ScoreBreakdown, str] = field(default_factory=dict)
    literals: list[str] | None = None
    """Each text of ``texts`` as the inside of a JSON string literal, when a
    `CandidateCache` keeps them (`grid.core.overlay.digest.json_literal_inside`)."""


def candidate_wire(
    ranked: Ranked, shared: SharedWire, group: int | None = None, weight_field: str | None = None
) -> dict[str, Any]:
    """`candidate_document`, reusing what ``shared`` already converted.

    Each candidate still gets its own dicts. ``group`` and ``weight_field`` are
    the candidate's `Selection` fields, written when given.
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
    if not is_plain_number(ranked.rank):
        shared.plain_numbers = False
    if group is not None:
        document["selection_group"] = group
        if not is_plain_number(group):
            shared.plain_numbers = False
    if weight_field is not None:
        document[weight_field] = candidate.capacity_weight
        if not is_plain_number(candidate.capacity_weight):
            shared.plain_numbers = False
    breakdown = evaluation.breakdown
    if breakdown is not None:
        wire = shared.breakdowns.get(breakdown)
        if wire is None:
            wire = shared.breakdowns[breakdown] = _breakdown_document(breakdown)
            if not all(map(is_plain_number, wire.values())):
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


def _add_canonical_text(
    document: dict[str, Any], breakdown: ScoreBreakdown | None, shared: SharedWire
) -> None:
    """Append the candidate's canonical text to ``shared.texts`` (or give up on them)."""
    assert shared.texts is not None
    breakdown_text = None
    if breakdown is not None:
        breakdown_text = shared.breakdown_texts.get(breakdown)
        if breakdown_text is None:
            breakdown_text = shared.breakdown_texts[breakdown] = canonical_breakdown(
                document["score_breakdown"]
            )
    try:
        text = canonical_candidate(document, breakdown_text)
    except (TypeError, KeyError):
        text = None
    if text is None:
        shared.texts = None
    else:
        shared.texts.append(text)


def candidate_document(ranked: Ranked) -> dict[str, Any]:
    """The §5 wire form of one ranked candidate (no field beyond §5's list)."""
    return candidate_wire(ranked, SharedWire())


def build_overlay(
    network: str,
    local_site: str,
    ranked: Sequence[Ranked],
    generated_at: datetime,
    selection: Selection | None = None,
) -> dict[str, Any]:
    """``grid-config.json``: ``{network, local_site, candidates[], generated_at}``.

    ``ranked`` must already be in rank order 0..n-1 (as `scoring.rank` returns).
    With ``selection`` the §14 fields are written too: top-level
    ``selection_policy`` (and ``selection_load_aware``), and each candidate's
    ``selection_group`` and weight.
    """
    return _build_overlay(network, local_site, ranked, generated_at, SharedWire(), selection)


def _build_overlay(
    network: str,
    local_site: str,
    ranked: Sequence[Ranked],
    generated_at: datetime,
    shared: SharedWire,
    selection: Selection | None,
    cache: CandidateCache | None = None,
) -> dict[str, Any]:
    overlay: dict[str, Any] = {"network": network, "local_site": local_site}
    if selection is None:
        if cache is not None:
            candidates = cache.documents(ranked, None, None, shared)
        else:
            candidates = [candidate_wire(r, shared, None, None) for r in ranked]
    else:
        if len(selection.groups) != len(ranked):
            raise ValueError("selection.groups must name one group per ranked candidate")
        overlay["selection_policy"] = selection.policy.value
        if selection.load_aware:
            overlay["selection_load_aware"] = True
        field_name = selection.weight_field
        if cache is not None:
            candidates = cache.documents(ranked, selection.groups, field_name, shared)
        else:
            candidates = [
                candidate_wire(r, shared, g, field_name)
                for r, g in zip(ranked, selection.groups, strict=True)
            ]
    overlay["candidates"] = candidates
    overlay["generated_at"] = format_timestamp(generated_at)
    return overlay


class BuiltOverlay(NamedTuple):
    """An overlay, its envelope and, when known, its candidates' canonical text.

    ``candidates_text`` is the inside of the ``candidates`` array as JCS writes it
    (and as ``json.dumps`` with sorted keys does), or ``None`` when some value is
    off the fast path of `grid.core.overlay.digest`; `grid.core.overlay.file_text`
    builds the files around it.
    """

    overlay: dict[str, Any]
    envelope: dict[str, Any]
    candidates_text: str | None
    candidates_literal: str | None = None
    """``candidates_text`` as the inside of a JSON string literal, when a cache kept
    each candidate's (a store writing the overlay as a string splices it in)."""


def build_overlay_and_envelope(
    network: str,
    local_site: str,
    ranked: Sequence[Ranked],
    generated_at: datetime,
    scope: Scope,
    provenance: Provenance,
    selection: Selection | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`build_overlay`, then `build_envelope` of it: the same two documents.

    Every number in the overlay is made here and checked as it is made
    (`is_plain_number`), and each candidate's canonical text is
    written as its document is built, each shared score breakdown once. When
    every number is plain that text is the digest's input; otherwise (or for
    text that does not encode as UTF-8) the digest takes the full path of
    `canonical_digest`. Tests hold both to the `rfc8785` reference.
    """
    built = build_overlay_parts(
        network, local_site, ranked, generated_at, scope, provenance, selection
    )
    return built.overlay, built.envelope


def build_overlay_parts(
    network: str,
    local_site: str,
    ranked: Sequence[Ranked],
    generated_at: datetime,
    scope: Scope,
    provenance: Provenance,
    selection: Selection | None = None,
    cache: CandidateCache | None = None,
) -> BuiltOverlay:
    """`build_overlay_and_envelope`, keeping the candidates' canonical text.

    With ``cache`` each candidate that kept its verdict since the cache's last
    build reuses its wire form (`CandidateCache`); the documents, the text and
    the digest are the same as without it.
    """
    shared = SharedWire(texts=[], literals=[] if cache is not None else None)
    overlay = _build_overlay(network, local_site, ranked, generated_at, shared, selection, cache)
    value, joined = None, None
    if shared.texts is not None and shared.plain_numbers:
        joined = ",".join(shared.texts)
        value = digest_of_joined(
            network,
            local_site,
            joined,
            overlay.get("selection_policy"),
            overlay.get("selection_load_aware"),
        )
    literal = None
    if value is None:
        joined = None
        value = digest(overlay, numbers_checked=shared.plain_numbers)
    elif shared.literals is not None:
        literal = ",".join(shared.literals)
    envelope = envelope_with_digest(overlay, scope, provenance, value)
    return BuiltOverlay(overlay, envelope, joined, literal)
