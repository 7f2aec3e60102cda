"""An overlay built through a `CandidateCache` is the overlay built without one.

Random builds reuse a small pool of candidate objects with random verdicts
(admission, tier, score breakdown), ranks, groups and selection fields, so a
candidate comes back the same, re-ranked, or with any one field changed; each
build through the cache must give the documents, canonical text, digest and
file text of a build from scratch.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.overlay import Provenance, Scope, Selection
from grid.core.overlay.candidate_cache import CandidateCache
from grid.core.overlay.document import build_overlay_parts
from grid.core.overlay.file_text import envelope_text, file_texts, overlay_text
from grid.core.routing.candidate import CandidateInput, CredentialRef
from grid.core.vocabulary import (
    AdmissionState,
    BackendKind,
    ScoreBreakdown,
    SelectionMode,
    SelectionTier,
)

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
SCOPE = Scope(network="mesh", gateway="edge", namespace="grid", local_site="east")
PROVENANCE = Provenance("0.1.0", "mesh", "uid-1", 3, T0)
CREDENTIAL = CredentialRef("bearer_token", "keys", "grid", "token")
POOL = tuple(
    CandidateInput(
        name=model,
        site=site,
        cluster=f"{site}-{model}",
        provider=f"{site}-{model}",
        backend_kind=BackendKind.LOCAL,
        credential=CREDENTIAL if site == "west" else None,
        capacity_weight=2 if model == "qwen" else 1,
    )
    for site in ("east", "west", "zürich")
    for model in ("llama", "qwen")
)
BREAKDOWNS = (
    None,
    ScoreBreakdown(0.3, 0.2, 0.1, 0.1, 0.05, 0.05, 0.8),
    ScoreBreakdown(0.3, 0.2, 0.1, 0.1, 0.05, 0.05, 0.8),  # equal, not the same object
    ScoreBreakdown(0.25, 0.2, 0.1, 0.1, 0.05, 0.05, 0.75),
    ScoreBreakdown(1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0),  # integral floats
    ScoreBreakdown(0.3, 0.2, 0.1, 0.1, 0.05, 5e-05, 0.75005),  # off the fast path
)


@dataclass(frozen=True)
class Verdict:
    """What the overlay reads of an evaluation (routing's `Evaluation` fits the same)."""

    candidate: CandidateInput
    admission: AdmissionState
    tier: SelectionTier
    breakdown: ScoreBreakdown | None


@dataclass(frozen=True)
class Placed:
    """A ranked verdict."""

    evaluation: Verdict
    rank: int


verdict = st.tuples(
    st.sampled_from(list(AdmissionState)),
    st.sampled_from(list(SelectionTier)),
    st.sampled_from(range(len(BREAKDOWNS))),
)
build = st.tuples(
    st.permutations(range(len(POOL))),
    st.integers(0, len(POOL)),
    st.lists(st.one_of(st.none(), verdict), min_size=len(POOL), max_size=len(POOL)),
    st.one_of(st.none(), st.sampled_from(list(SelectionMode))),
    st.lists(st.integers(0, 3), min_size=len(POOL), max_size=len(POOL)),
)
"""Rank order, how many are ranked, each candidate's new verdict (None keeps the last
one), the selection mode (None writes no selection fields) and the groups."""


def _text(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


@settings(max_examples=300)
@given(st.lists(build, min_size=1, max_size=8), st.booleans())
def test_cached_builds_equal_builds_from_scratch(builds: list[Any], same_records: bool) -> None:
    """``same_records``: a candidate whose verdict and rank held comes back as the very
    ranked record of the last build (as a render's kept rank order hands it out)."""
    cache = CandidateCache()
    verdicts = [(AdmissionState.NEW_AND_EXISTING, SelectionTier.SAME_SITE, 1)] * len(POOL)
    records: dict[tuple[Any, ...], Placed] = {}
    for order, count, changes, mode, groups in builds:
        verdicts = [old if new is None else new for old, new in zip(verdicts, changes, strict=True)]
        ranked = []
        for r, i in enumerate(order[:count]):
            key = (i, *verdicts[i], r)
            placed = records.get(key) if same_records else None
            if placed is None:
                admission, tier, breakdown = verdicts[i]
                placed = Placed(Verdict(POOL[i], admission, tier, BREAKDOWNS[breakdown]), r)
                records[key] = placed
            ranked.append(placed)
        selection = None if mode is None else Selection.for_mode(mode, groups[: len(ranked)])
        args = ("mesh", "east", ranked, T0, SCOPE, PROVENANCE, selection)
        kept = build_overlay_parts(*args, cache=cache)
        scratch = build_overlay_parts(*args)
        assert kept[:3] == scratch[:3]
        assert scratch.candidates_literal is None
        content = {k: v for k, v in scratch.overlay.items() if k != "generated_at"}
        assert (
            scratch.envelope["revision"]["value"]
            == hashlib.sha256(rfc8785.dumps(content)).hexdigest()
        )
        if kept.candidates_literal is not None:
            assert kept.candidates_text is not None
            assert kept.candidates_literal == json.dumps(kept.candidates_text)[1:-1]
            files = file_texts(
                kept.overlay, kept.envelope, kept.candidates_text, kept.candidates_literal
            )
            assert files.config_literal == json.dumps(files.config)
            assert files.envelope_literal == json.dumps(files.envelope)
            lines = file_texts(
                kept.overlay, kept.envelope, kept.candidates_text, kept.candidates_literal, "\n"
            )
            assert lines.config == f"{files.config}\n"
            assert lines.envelope == f"{files.envelope}\n"
            assert lines.config_literal == json.dumps(lines.config)
            assert lines.envelope_literal == json.dumps(lines.envelope)
        config = overlay_text(kept.overlay, kept.candidates_text)
        assert config == _text(scratch.overlay)
        assert envelope_text(kept.envelope, config) == _text(scratch.envelope)
