"""The core's one admission, tier and kind vocabulary, and the wire names SPEC-DECISIONS fixes."""

from __future__ import annotations

from grid.core.overlay.structure import (
    ADMISSION_STATES,
    CANDIDATE_KINDS,
    SELECTION_TIERS,
    check_overlay_structure,
)
from grid.core.vocabulary import (
    ADMISSION_ORDER,
    KIND_NOUNS,
    OVERLAY_ADMISSIONS,
    TIER_ORDER,
    AdmissionState,
    CandidateKind,
    SelectionTier,
)


def test_the_overlay_reads_the_wire_names_spec_decisions_fixes() -> None:
    assert {"new_and_existing", "existing_only", "none"} == ADMISSION_STATES
    assert OVERLAY_ADMISSIONS["none"] is AdmissionState.EXCLUDED
    assert {
        "same_site",
        "same_zone",
        "same_region",
        "cross_region",
        "unknown",
    } == SELECTION_TIERS
    assert {"inference_model", "mcp_tool", "a2a_agent"} == CANDIDATE_KINDS
    assert set(KIND_NOUNS) == CANDIDATE_KINDS


def test_candidates_order_by_admission_then_by_nearness() -> None:
    admissions = sorted(AdmissionState, key=ADMISSION_ORDER.__getitem__)
    assert admissions == [
        AdmissionState.NEW_AND_EXISTING,
        AdmissionState.EXISTING_ONLY,
        AdmissionState.EXCLUDED,
    ]
    tiers = sorted(SelectionTier, key=TIER_ORDER.__getitem__)
    assert [t.value for t in tiers] == [
        "same_site",
        "same_zone",
        "same_region",
        "cross_region",
        "unknown",
    ]


def test_a_reader_accepts_every_state_of_the_vocabulary_by_its_wire_name() -> None:
    base = {"kind": "", "name": "m", "site": "s", "cluster": "c"}
    for kind in CandidateKind:
        for name in OVERLAY_ADMISSIONS:
            for tier in SelectionTier:
                candidate = base | {"kind": kind.value}
                candidate |= {"admission_state": name, "selection_tier": tier.value}
                overlay = {"network": "n", "local_site": "s", "candidates": [candidate]}
                assert check_overlay_structure(overlay) is None
    assert check_overlay_structure(
        {"network": "n", "local_site": "s", "candidates": [base | {"kind": "model"}]}
    )
