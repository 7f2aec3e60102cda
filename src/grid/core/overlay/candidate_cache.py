"""Each overlay candidate's wire form, kept from one overlay build to the next.

A render round in which one provider changed needs only that provider's
candidates written again: the others keep their fields, and at most their
``rank`` and ``selection_group`` move. `CandidateCache` keeps each candidate's
document and canonical text cut around those two values
(`grid.core.overlay.digest.candidate_text_parts`), so the next build fills
them in instead of converting and serialising the candidate again. The
documents, the text and the digest are the ones a build without the cache makes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import compress
from operator import is_not, ne, or_
from typing import Any, NamedTuple

from grid.core.overlay.digest import (
    CandidateTextParts,
    candidate_text_parts,
    canonical_breakdown,
    is_plain_number,
    json_literal_inside,
)
from grid.core.overlay.document import Ranked, Routed, SharedWire, candidate_wire
from grid.core.vocabulary import AdmissionState, ScoreBreakdown, SelectionTier


class _Parts(NamedTuple):
    """One candidate's wire form but for its rank and group, and what it was made from."""

    candidate: Routed
    admission: AdmissionState
    tier: SelectionTier
    breakdown: ScoreBreakdown | None
    weight_field: str | None
    grouped: bool
    head: dict[str, Any]
    """The document's fields before ``rank``, in the order a build writes them."""
    tail: dict[str, Any]
    """The fields after ``rank`` and ``selection_group``."""
    text: CandidateTextParts | None
    plain: bool
    """Every number of ``head`` and ``tail`` passes `is_plain_number`."""
    literal: CandidateTextParts | None
    """``text``'s three parts each as the inside of a JSON string literal."""


class _Made(NamedTuple):
    """What the last build made of one candidate: its parts, document and text."""

    parts: _Parts
    ranked: Ranked
    """The ranked record it was made for, or last found equal for."""
    rank: int
    group: int | None
    document: dict[str, Any]
    text: str | None
    plain: bool
    literal: str | None
    """``text`` as the inside of a JSON string literal (`json_literal_inside`)."""


class _Build(NamedTuple):
    """The last build, place by place: what `CandidateCache.documents` patches."""

    ranked: Sequence[Ranked]
    groups: Sequence[int] | None
    weight_field: str | None
    made: list[_Made]
    documents: list[dict[str, Any]]
    texts: list[str | None]
    literals: list[str | None]
    plain: list[bool]


class CandidateCache:
    """Each candidate's wire form, kept from one overlay build to the next.

    A render round in which one provider changed moves that provider's
    candidates and renumbers those between their old and new places, but every
    other candidate keeps its fields. The cache keeps, per candidate object,
    the document and canonical text around its ``rank`` and ``selection_group``
    (`candidate_text_parts`), and reuses them when the same candidate comes back
    with the same admission, tier, score breakdown and selection fields. The
    candidate itself is frozen and held by the entry, so its identity stands
    for its fields. Only the last build's candidates are kept.

    A place that holds the very ranked record of the last build's at that place,
    with the same group, takes that build's document and text as they are; the
    places are compared all at once, and only the others are looked at one by one.
    """

    def __init__(self) -> None:
        self._last: _Build | None = None
        self.reused = 0
        """Candidates of the last build whose wire form was reused."""

    def documents(
        self,
        ranked: Sequence[Ranked],
        groups: Sequence[int] | None,
        weight_field: str | None,
        shared: SharedWire,
    ) -> list[dict[str, Any]]:
        """`candidate_wire` of each of ``ranked`` (with ``groups[i]`` when given), as one build.

        Adds each candidate's text and literal to ``shared`` as `candidate_wire` would.
        """
        last = self._last
        ranked, groups = tuple(ranked), None if groups is None else tuple(groups)
        changed = _changed(last, ranked, groups, weight_field)
        self.reused = 0
        places: Sequence[int]
        if last is None or changed is None:
            kept = {} if last is None else {_key(m): m for m in last.made}
            blank: list[Any] = [None] * len(ranked)
            build = _Build(ranked, groups, weight_field, *(list(blank) for _ in range(5)))
            places = range(len(ranked))
        else:
            # A record that moved was at another changed place (every other one stayed).
            kept = {_key(last.made[i]): last.made[i] for i in changed}
            build = last._replace(
                ranked=ranked,
                groups=groups,
                made=list(last.made),
                documents=list(last.documents),
                texts=list(last.texts),
                literals=list(last.literals),
                plain=list(last.plain),
            )
            self.reused = len(ranked) - len(changed)
            places = changed
        for i in places:
            record = ranked[i]
            group = None if groups is None else groups[i]
            made = self._one(record, kept.get(id(record.evaluation.candidate)), group, weight_field)
            build.made[i], build.documents[i] = made, made.document
            build.texts[i], build.literals[i], build.plain[i] = made.text, made.literal, made.plain
        self._last = build
        _share(build, shared)
        return list(build.documents)

    def _one(
        self, ranked: Ranked, made: _Made | None, group: int | None, weight_field: str | None
    ) -> _Made:
        """``ranked``'s wire form, given what the last build made of its candidate.

        A candidate back at the same rank and group gets the very document and
        text the last build made (documents are never changed once built). The
        very ranked record of the last build (records are frozen) is known at once.
        """
        if (
            made is None
            or made.ranked is not ranked
            or made.group != group
            or made.parts.weight_field != weight_field
        ):
            return self._remade(ranked, made, group, weight_field)
        self.reused += 1
        return made

    def _remade(
        self, ranked: Ranked, made: _Made | None, group: int | None, weight_field: str | None
    ) -> _Made:
        """``ranked``'s wire form from what ``made`` (the last build's) still holds."""
        evaluation = ranked.evaluation
        candidate = evaluation.candidate
        parts = None if made is None else made.parts
        if (
            parts is None
            or parts.candidate is not candidate
            or parts.admission is not evaluation.admission
            or parts.tier is not evaluation.tier
            or parts.weight_field != weight_field
            or parts.grouped != (group is not None)
            or not (
                parts.breakdown is evaluation.breakdown or parts.breakdown == evaluation.breakdown
            )
        ):
            made, parts = None, _parts_of(ranked, group, weight_field)
        else:
            self.reused += 1
        rank = ranked.rank
        if made is None or made.rank != rank or made.group != group:
            return _made_of(parts, ranked, rank, group)
        return made._replace(ranked=ranked)


def _key(made: _Made) -> int:
    """The identity of the candidate ``made`` is the wire form of."""
    return id(made.ranked.evaluation.candidate)


def _changed(
    last: _Build | None,
    ranked: Sequence[Ranked],
    groups: Sequence[int] | None,
    weight_field: str | None,
) -> list[int] | None:
    """The places where ``ranked`` or ``groups`` differ from ``last``'s, or None to look
    at every place (no last build, another length or selection, or most places changed)."""
    if (
        last is None
        or len(last.ranked) != len(ranked)
        or last.weight_field != weight_field
        or (last.groups is None) != (groups is None)
    ):
        return None
    moved: Iterator[bool] = map(is_not, ranked, last.ranked)
    if groups is not None and last.groups is not None:
        if len(groups) != len(ranked) or len(last.groups) != len(ranked):
            return None
        moved = map(or_, moved, map(ne, groups, last.groups))
    changed = list(compress(range(len(ranked)), moved))
    return changed if len(changed) * 2 <= len(ranked) else None


def _share(build: _Build, shared: SharedWire) -> None:
    """Hand ``build``'s texts and number check to the overlay's ``shared`` wire state."""
    if not all(build.plain):
        shared.plain_numbers = False
    if shared.texts is not None:
        shared.texts = None if None in build.texts else list(build.texts)  # type: ignore[arg-type]
    if shared.literals is not None:
        literals = build.literals
        shared.literals = None if None in literals else list(literals)  # type: ignore[arg-type]


def _made_of(parts: _Parts, ranked: Ranked, rank: int, group: int | None) -> _Made:
    """One candidate's document and text at ``rank`` and ``group``."""
    if group is None:
        document = {**parts.head, "rank": rank, **parts.tail}
    else:
        document = {**parts.head, "rank": rank, "selection_group": group, **parts.tail}
    plain = parts.plain and is_plain_number(rank) and (group is None or is_plain_number(group))
    text = literal = None
    if parts.text is not None:
        head, middle, tail = parts.text
        number, group_text = repr(rank), "" if group is None else str(group)
        text = f"{head}{number}{middle}{group_text}{tail}"
        if parts.literal is not None:
            # Digits need no escape: the literal is cut where the text is.
            head, middle, tail = parts.literal
            literal = f"{head}{number}{middle}{group_text}{tail}"
    return _Made(parts, ranked, rank, group, document, text, plain, literal)


def _parts_of(ranked: Ranked, group: int | None, weight_field: str | None) -> _Parts:
    """Build one candidate's document from scratch and cut it around rank and group."""
    shared = SharedWire()
    document = candidate_wire(ranked, shared, group, weight_field)
    keys = list(document)
    at = keys.index("rank")
    after = at + (2 if group is not None else 1)
    head = {k: document[k] for k in keys[:at]}
    tail = {k: document[k] for k in keys[after:]}
    evaluation = ranked.evaluation
    breakdown = evaluation.breakdown
    text = None
    try:
        breakdown_text = (
            None if breakdown is None else canonical_breakdown(document["score_breakdown"])
        )
        text = candidate_text_parts(document, breakdown_text)
    except (TypeError, KeyError):
        text = None
    literal = (
        None
        if text is None
        else (
            json_literal_inside(text[0]),
            json_literal_inside(text[1]),
            json_literal_inside(text[2]),
        )
    )
    return _Parts(
        evaluation.candidate,
        evaluation.admission,
        evaluation.tier,
        breakdown,
        weight_field,
        group is not None,
        head,
        tail,
        text,
        shared.plain_numbers,
        literal,
    )
