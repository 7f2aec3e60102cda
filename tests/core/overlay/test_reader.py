"""The reader side of SPEC-DECISIONS §5: what `verify` accepts from other producers."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.overlay import canonical_digest, secret_ref_of, stable_id_of, verify

SCOPE = {"network": "mesh", "gateway": "edge", "namespace": "ns", "local_site": "east"}


def _upstream_candidate(name: str = "m", site: str = "east") -> dict[str, Any]:
    """A candidate as a minimal upstream producer writes it (no admission or tier)."""
    return {
        "kind": "inference_model",
        "name": name,
        "site": site,
        "cluster": "c",
        "fresh": True,
        "stable_id": "anything-the-producer-chose",
        "rank": 0,
    }


def _overlay(*candidates: dict[str, Any]) -> dict[str, Any]:
    return {"network": "mesh", "local_site": "east", "candidates": list(candidates)}


def _envelope(overlay: dict[str, Any]) -> dict[str, Any]:
    digest = canonical_digest(overlay)
    return {
        "schema_version": "1.0.0",
        "revision": {"kind": "content_addressed", "algorithm": "sha256", "value": digest},
        "content_digest": {"algorithm": "sha256", "value": digest},
        "scope": dict(SCOPE),
        "provenance": {"producer": "someone-else", "rendered_at": "2026-01-01T00:00:00Z"},
        "overlay": overlay,
    }


def test_bare_upstream_overlay_is_accept_legacy() -> None:
    verdict = verify(_overlay(_upstream_candidate()))
    assert (verdict.verdict, verdict.reason) == ("accept_legacy", None)


def test_upstream_envelope_without_admission_or_tier_is_accepted() -> None:
    envelope = _envelope(_overlay(_upstream_candidate()))
    verdict = verify(envelope)
    assert verdict.as_dict() == {
        "verdict": "accept",
        "reason": None,
        "revision": envelope["revision"]["value"],
    }


def test_only_kind_name_site_cluster_are_required() -> None:
    bare = {"kind": "mcp_tool", "name": "t", "site": "east", "cluster": "c"}
    assert verify(_overlay(bare)).verdict == "accept_legacy"
    for key in ("kind", "name", "site", "cluster"):
        partial = {k: v for k, v in bare.items() if k != key}
        assert verify(_overlay(partial)).reason == "malformed_structure", key


def test_a_newer_producers_top_level_field_is_accepted() -> None:
    envelope = _envelope(_overlay(_upstream_candidate()))
    envelope["signature"] = {"anything": [1, 2, 3]}
    envelope["scope"]["cell"] = "a"
    envelope["provenance"]["build"] = "x"
    assert verify(envelope).verdict == "accept"


def test_lenient_structure_lets_the_real_verdict_through() -> None:
    envelope = _envelope(_overlay(_upstream_candidate()))
    envelope["content_digest"]["value"] = "0" * 64
    assert verify(envelope).reason == "digest_mismatch"
    envelope = _envelope(_overlay(_upstream_candidate()))
    envelope["scope"]["network"] = "elsewhere"
    assert verify(envelope).reason == "scope_mismatch"


def test_present_optional_fields_are_type_checked() -> None:
    for key, bad in (
        ("fresh", "yes"),
        ("stable_id", 7),
        ("admission_state", "excluded"),
        ("selection_tier", "moon"),
        ("rank", -1),
        ("rank", True),
        ("score", "high"),
        ("score_breakdown", []),
    ):
        candidate = _upstream_candidate() | {key: bad}
        assert verify(_overlay(candidate)).reason == "malformed_structure", key


def test_a_score_that_differs_from_its_breakdown_is_not_a_structural_fault() -> None:
    candidate = _upstream_candidate() | {"score": 0.9, "score_breakdown": {"total": 0.1}}
    assert verify(_overlay(candidate)).verdict == "accept_legacy"


def test_strings_are_one_to_256_characters_and_not_blank() -> None:
    assert verify(_overlay(_upstream_candidate(name="n" * 256))).verdict == "accept_legacy"
    for name in ("", "   ", "n" * 257):
        assert verify(_overlay(_upstream_candidate(name=name))).reason == "malformed_structure"
    envelope = _envelope(_overlay(_upstream_candidate()))
    envelope["scope"]["gateway"] = " "
    assert verify(envelope).reason == "malformed_structure"


def test_credential_accepts_the_secret_ref_alias_and_refuses_unknown_fields() -> None:
    ref = {"name": "s", "namespace": "ns", "key": "token"}
    for spelling in ("secretRef", "secret_ref"):
        candidate = _upstream_candidate() | {"credential": {"strategy": "api_key", spelling: ref}}
        assert verify(_overlay(candidate)).verdict == "accept_legacy", spelling
        assert secret_ref_of(candidate["credential"]) == ref
    for credential in (
        {"strategy": "api_key", "secretRef": ref, "token": "sk-1"},
        {"strategy": "api_key", "secretRef": ref | {"value": "sk-1"}},
        {"strategy": "api_key", "secretRef": ref, "secret_ref": ref},
    ):
        candidate = _upstream_candidate() | {"credential": credential}
        assert verify(_overlay(candidate)).reason == "malformed_structure"


def test_stable_id_falls_back_to_the_identity_path() -> None:
    candidate = {"kind": "inference_model", "name": "m", "site": "east", "cluster": "c"}
    assert stable_id_of(candidate) == "inference_model/m/east/c"
    assert stable_id_of(candidate | {"stable_id": "1a2b3c4d"}) == "1a2b3c4d"


# Random valid envelopes with additive fields at random levels.
_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
_names = _names.filter(lambda s: not s.isspace())
_extra_keys = st.sampled_from(["x_extra", "labels", "weight", "hint"])
_extra_values = st.one_of(
    st.integers(-1000, 1000), st.booleans(), _names, st.lists(st.integers(0, 9), max_size=3)
)
_extras = st.dictionaries(_extra_keys, _extra_values, max_size=2)


@st.composite
def _documents(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 4))
    names = draw(st.lists(_names, min_size=count, max_size=count, unique=True))
    candidates = [
        _upstream_candidate(name=name) | {"rank": index} | draw(_extras)
        for index, name in enumerate(names)
    ]
    overlay = _overlay(*candidates) | draw(_extras)
    envelope = _envelope(overlay) | draw(_extras)
    envelope["scope"] |= draw(_extras)
    envelope["provenance"] |= draw(_extras)
    return envelope


def _mutations(overlay: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Every (container, key) inside ``overlay`` whose change must move the digest."""
    places: list[tuple[dict[str, Any], str]] = [(overlay, "network")]
    places += [(overlay, key) for key in overlay if key not in ("candidates", "network")]
    for candidate in overlay["candidates"]:
        places += [(candidate, key) for key in candidate if key != "kind"]
    return places


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x" * 13  # longer than any drawn name, so never a duplicate identity
    return [*value, 1]


@settings(max_examples=150, deadline=None)
@given(_documents(), st.data())
def test_additive_fields_verify_and_any_change_inside_overlay_breaks_the_digest(
    envelope: dict[str, Any], data: st.DataObject
) -> None:
    verdict = verify(envelope)
    assert (verdict.verdict, verdict.revision) == ("accept", envelope["revision"]["value"])
    changed = copy.deepcopy(envelope)
    places = _mutations(changed["overlay"])
    container, key = places[data.draw(st.integers(0, len(places) - 1))]
    container[key] = _changed(container[key])
    assert verify(changed).reason == "digest_mismatch"
