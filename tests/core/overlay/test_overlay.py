"""The overlay document, its envelope, the JCS digest, stable ids and `verify`."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.overlay import (
    Provenance,
    Scope,
    build_envelope,
    build_overlay,
    build_overlay_and_envelope,
    candidate_document,
    canonical_digest,
    verify,
)
from grid.core.overlay.ids import fnv1a_32, stable_id
from grid.core.routing.candidate import CandidateInput, CredentialRef, Geography, SignalValues
from grid.core.routing.ranking import score_candidates
from grid.core.routing.scoring import ScoringConfig, ScoringContext, ScoringWeights
from grid.core.vocabulary import BackendKind
from grid.testing.strategies import json_values

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "overlay"
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
EAST = Geography("us-east", "us-east-1a")
SCOPE = Scope(network="quickstart", gateway="edge", namespace="grid-system", local_site="east")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # Reference vectors of the FNV test suite (Fowler/Noll/Vo), FNV-1a 32-bit.
        (b"", 0x811C9DC5),
        (b"a", 0xE40C292C),
        (b"foobar", 0xBF9CF968),
    ],
)
def test_fnv1a_32_matches_reference_vectors(data: bytes, expected: int) -> None:
    assert fnv1a_32(data) == expected


def test_fnv1a_32_continues_from_a_given_state() -> None:
    assert fnv1a_32(b"bar", fnv1a_32(b"foo")) == fnv1a_32(b"foobar") == 0xBF9CF968
    assert fnv1a_32(b"", fnv1a_32(b"x")) == fnv1a_32(b"x")


@pytest.mark.parametrize(
    ("identity", "expected"),
    [
        (("inference_model", "llama-3.1-8b-instruct", "east", "vllm-east"), "7e486b9f"),
        (("other", "m", "s", "c"), "3f720ea5"),
        (("inference_model", "é", "s", "c"), "8766ad97"),
    ],
)
def test_stable_id_known_values(identity: tuple[str, str, str, str], expected: str) -> None:
    # Fixed values: the kind prefix is hashed once per kind, never differently.
    assert stable_id(*identity) == expected


def test_stable_id_is_eight_hex_digits_over_kind_name_site_cluster() -> None:
    value = stable_id("inference_model", "llama-3.1-8b-instruct", "east", "vllm-east")
    assert value == f"{fnv1a_32(b'inference_model/llama-3.1-8b-instruct/east/vllm-east'):08x}"
    assert len(value) == 8 and value == value.lower()
    # Empty fields still hash the separators.
    assert stable_id("", "", "", "") == f"{fnv1a_32(b'///'):08x}"
    # Non-ASCII is hashed as UTF-8.
    assert stable_id("k", "é", "s", "c") == f"{fnv1a_32('k/é/s/c'.encode()):08x}"


def test_canonical_digest_uses_jcs_number_forms() -> None:
    overlay = {
        "network": "quickstart",
        "local_site": "east",
        "generated_at": "ignored",
        "candidates": [
            {"g": -1.5, "f": -0.0, "e": 1e-7, "d": 1e21, "c": 0.1 + 0.2, "b": 0.7, "a": 1.0}
        ],
    }
    # JCS: keys sorted, 1.0 -> 1, 0.7 -> 0.7, 1e21 -> 1e+21, 1e-7 -> 1e-7, -0 -> 0.
    canonical = (
        b'{"candidates":[{"a":1,"b":0.7,"c":0.30000000000000004,"d":1e+21,"e":1e-7,'
        b'"f":0,"g":-1.5}],"local_site":"east","network":"quickstart"}'
    )
    assert canonical_digest(overlay) == hashlib.sha256(canonical).hexdigest()
    assert (
        canonical_digest(overlay)
        == "7ea6f813a530a2c7f1567976a56d5e9cf6bf0aaebebcbd45b6b65a36cd3303ae"
    )


def test_canonical_digest_ignores_generated_at() -> None:
    one = {"network": "n", "local_site": "s", "candidates": [], "generated_at": "a"}
    two = {**one, "generated_at": "b"}
    expected = "5fd77226986f007c9108d559a7ae3a96eaa88e02a9d1a4a222fae210e51f22d4"
    assert canonical_digest(one) == canonical_digest(two) == expected


def _candidates() -> list[CandidateInput]:
    return [
        CandidateInput(
            name="llama",
            site="east",
            cluster="vllm-east",
            provider="vllm-east",
            backend_kind=BackendKind.LOCAL,
            geography=EAST,
            signals=SignalValues(queue_depth=0.2),
            observed_at=T0,
        ),
        CandidateInput(
            name="gpt-4o-mini",
            site="east",
            cluster="openai",
            provider="openai",
            backend_kind=BackendKind.API_PROVIDER,
            credential=CredentialRef("bearer_token", "openai-credentials", "grid-system", "key"),
        ),
    ]


def _envelope(enabled: bool = True, now: datetime = T0) -> dict[str, Any]:
    context = ScoringContext("east", EAST, ScoringConfig(enabled=enabled))
    ranking = score_candidates(_candidates(), context)
    overlay = build_overlay("quickstart", "east", ranking.ranked, now)
    provenance = Provenance("0.1.0", "quickstart", None, None, now)
    return build_envelope(overlay, SCOPE, provenance)


def test_candidate_documents_carry_exactly_the_section_5_fields() -> None:
    envelope = _envelope()
    first, second = envelope["overlay"]["candidates"]
    base = {
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
    assert set(first) == base | {"score", "score_breakdown"}
    assert set(second) == base | {"score", "score_breakdown", "credential"}
    assert second["credential"] == {
        "strategy": "bearer_token",
        "secretRef": {"name": "openai-credentials", "namespace": "grid-system", "key": "key"},
    }
    assert set(first["score_breakdown"]) == {
        "locality",
        "queue_depth",
        "kv_cache",
        "prefix_cache",
        "latency",
        "cost",
        "total",
    }
    assert first["score"] == first["score_breakdown"]["total"]
    assert first["stable_id"] == stable_id("inference_model", "llama", "east", "vllm-east")
    assert [c["rank"] for c in envelope["overlay"]["candidates"]] == [0, 1]


def test_candidates_of_one_provider_get_their_own_breakdown_dicts() -> None:
    # Candidates of one provider share one ScoreBreakdown; the overlay converts
    # it once but every candidate document owns its dict.
    template = _candidates()[0]
    twins = [template, CandidateInput(**{**vars(template), "name": "llama-2"})]
    ranking = score_candidates(twins, ScoringContext("east", EAST))
    first, second = build_overlay("quickstart", "east", ranking.ranked, T0)["candidates"]
    assert first["score_breakdown"] == second["score_breakdown"]
    assert first["score_breakdown"] is not second["score_breakdown"]
    assert [candidate_document(r) for r in ranking.ranked] == [first, second]


@pytest.mark.parametrize(
    "weights",
    [
        ScoringWeights(),
        # A cost share below 1e-4 is written with an exponent ("5e-05") by the
        # standard library; the digest must still be the JCS one.
        ScoringWeights(locality=3, queue_depth=3, kv_cache=2, prefix_cache=2, latency=2, cost=1e-4),
        ScoringWeights(locality=1, queue_depth=0, kv_cache=0, prefix_cache=0, latency=0, cost=0),
    ],
)
def test_overlay_and_envelope_in_one_step_equal_the_two_steps(weights: ScoringWeights) -> None:
    context = ScoringContext("east", EAST, ScoringConfig(weights=weights))
    ranked = score_candidates(_candidates(), context).ranked
    provenance = Provenance("0.1.0", "quickstart", None, None, T0)
    overlay, envelope = build_overlay_and_envelope(
        "quickstart", "east", ranked, T0, SCOPE, provenance
    )
    assert overlay == build_overlay("quickstart", "east", ranked, T0)
    assert json.dumps(envelope) == json.dumps(build_envelope(overlay, SCOPE, provenance))
    content = {k: overlay[k] for k in ("candidates", "local_site", "network")}
    expected = hashlib.sha256(rfc8785.dumps(content)).hexdigest()
    assert envelope["revision"]["value"] == envelope["content_digest"]["value"] == expected


def test_envelope_shape_and_revision() -> None:
    envelope = _envelope()
    assert envelope["schema_version"] == "1.0.0"
    digest = canonical_digest(envelope["overlay"])
    assert envelope["revision"] == {
        "kind": "content_addressed",
        "algorithm": "sha256",
        "value": digest,
    }
    assert envelope["content_digest"] == {"algorithm": "sha256", "value": digest}
    assert envelope["scope"] == SCOPE.as_dict()
    assert envelope["provenance"] == {
        "producer": "grid-operator",
        "producer_version": "0.1.0",
        "source_name": "quickstart",
        "source_uid": None,
        "source_generation": None,
        "rendered_at": "2026-01-01T12:00:00.000Z",
    }
    assert set(envelope["overlay"]) == {"network", "local_site", "candidates", "generated_at"}
    assert envelope["overlay"]["generated_at"] == "2026-01-01T12:00:00.000Z"


def test_identical_state_rendered_later_keeps_the_revision() -> None:
    early, late = _envelope(now=T0), _envelope(now=T0 + timedelta(hours=1))
    assert early["revision"] == late["revision"]
    assert early["provenance"] != late["provenance"]


def test_poll_mode_overlay_has_no_scores_and_verifies() -> None:
    envelope = _envelope(enabled=False)
    assert all("score" not in c for c in envelope["overlay"]["candidates"])
    assert verify(envelope).verdict == "accept"


def test_rendered_envelope_verifies_and_survives_json_round_trip() -> None:
    envelope = json.loads(json.dumps(_envelope()))
    verdict = verify(envelope, SCOPE)
    assert verdict.as_dict() == {
        "verdict": "accept",
        "reason": None,
        "revision": envelope["revision"]["value"],
    }
    assert verify(envelope["overlay"]).verdict == "accept_legacy"


def test_check_order_structure_before_schema_version_before_digest() -> None:
    envelope = _envelope()
    del envelope["schema_version"]
    envelope["overlay"]["candidates"][0]["fresh"] = False  # also a digest mismatch
    assert verify(envelope).reason == "missing_schema_version"
    envelope["overlay"]["candidates"][0]["rank"] = -1  # and now malformed
    assert verify(envelope).reason == "malformed_structure"


def test_check_order_digest_before_revision_before_scope() -> None:
    envelope = _envelope()
    envelope["scope"]["network"] = "elsewhere"
    envelope["revision"]["value"] = "0" * 64
    assert verify(envelope).reason == "revision_digest_mismatch"
    envelope["content_digest"]["value"] = "1" * 64
    assert verify(envelope).reason == "digest_mismatch"


def test_any_envelope_key_selects_the_envelope_path() -> None:
    overlay = copy.deepcopy(_envelope()["overlay"])
    overlay["provenance"] = {}
    # Not accepted as legacy: an envelope key is present, so the envelope rules apply.
    assert verify(overlay).reason == "malformed_structure"


def test_expected_scope_with_none_values_compares_only_given_keys() -> None:
    envelope = _envelope()
    assert verify(envelope, {"gateway": "edge", "namespace": None}).verdict == "accept"
    assert verify(envelope, {"namespace": "default"}).reason == "scope_mismatch"


CASES: dict[str, dict[str, Any]] = json.loads((FIXTURES / "cases.json").read_text())


def test_fixtures_cover_every_verdict_and_reason() -> None:
    verdicts = {case["verdict"] for case in CASES.values()}
    reasons = {case["reason"] for case in CASES.values()}
    assert verdicts == {"accept", "accept_legacy", "reject"}
    assert reasons == {
        None,
        "malformed_structure",
        "missing_schema_version",
        "unsupported_schema_version",
        "digest_mismatch",
        "revision_digest_mismatch",
        "scope_mismatch",
    }
    assert {p.name for p in FIXTURES.glob("*.json")} == set(CASES) | {"cases.json"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_verdict(name: str) -> None:
    case = CASES[name]
    document = json.loads((FIXTURES / name).read_text())
    verdict = verify(document, case.get("expected_scope"))
    assert (verdict.verdict, verdict.reason) == (case["verdict"], case["reason"])
    if verdict.verdict == "reject":
        assert verdict.revision is None
    else:
        assert verdict.revision == canonical_digest(document.get("overlay", document))


JSON_VALUES = json_values()


@settings(max_examples=200, deadline=None)
@given(JSON_VALUES)
def test_verify_never_raises_on_arbitrary_json(document: Any) -> None:
    assert verify(document).verdict in {"accept", "accept_legacy", "reject"}


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_verify_never_raises_on_mutated_envelopes(data: st.DataObject) -> None:
    envelope = json.loads(json.dumps(_envelope()))
    paths: list[tuple[Any, Any]] = []

    def collect(node: Any) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            paths.append((node, key))
            if isinstance(value, dict | list):
                collect(value)

    collect(envelope)
    for _ in range(data.draw(st.integers(1, 3))):
        node, key = data.draw(st.sampled_from(paths))
        node[key] = data.draw(JSON_VALUES)
    verdict = verify(envelope)
    assert verdict.verdict in {"accept", "reject"}
    if verdict.verdict == "accept":
        assert verdict.revision == canonical_digest(envelope["overlay"])


NAMES = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6
) | st.sampled_from(['a"b', "c\\d", "e\nf", "\x00", "\x7f", "\u2028", "\ue000", "\U0001f600"])


@st.composite
def rendered_candidates(draw: st.DrawFn) -> list[CandidateInput]:
    out = []
    for i in range(draw(st.integers(min_value=0, max_value=6))):
        ratio = st.none() | st.floats(min_value=0, max_value=1)
        credential = draw(
            st.none()
            | st.builds(
                CredentialRef, st.sampled_from(["bearer_token", "api_key"]), NAMES, NAMES, NAMES
            )
        )
        out.append(
            CandidateInput(
                name=draw(NAMES),
                site=draw(st.sampled_from(["east", "west", "é"])),
                cluster=f"c{i}",
                provider=f"p{i}",
                backend_kind=draw(st.sampled_from(list(BackendKind))),
                geography=EAST,
                signals=SignalValues(
                    queue_depth=draw(ratio),
                    kv_cache_utilization=draw(ratio),
                    prefix_cache_hit_ratio=draw(ratio),
                    p99_latency_ms=draw(st.none() | st.floats(min_value=0, max_value=1e6)),
                ),
                fresh=draw(st.booleans()),
                credential=credential,
            )
        )
    return out


@settings(max_examples=150, deadline=None)
@given(rendered_candidates(), st.booleans(), NAMES, NAMES)
def test_one_step_digest_is_the_jcs_digest(
    candidates: list[CandidateInput], enabled: bool, network: str, local_site: str
) -> None:
    # The one-step build writes each candidate's canonical text itself; it must
    # be exactly RFC 8785's, for any names, credentials and scores.
    context = ScoringContext("east", EAST, ScoringConfig(enabled=enabled))
    ranked = score_candidates(candidates, context).ranked
    provenance = Provenance("0.1.0", "n", None, None, T0)
    scope = Scope(network, "edge", "ns", local_site)
    overlay, envelope = build_overlay_and_envelope(
        network, local_site, ranked, T0, scope, provenance
    )
    content = {k: overlay[k] for k in ("candidates", "local_site", "network")}
    assert envelope["revision"]["value"] == hashlib.sha256(rfc8785.dumps(content)).hexdigest()
    assert envelope == build_envelope(overlay, scope, provenance)


@pytest.mark.parametrize("number", [float("inf"), float("-inf"), float("nan")])
def test_a_number_json_cannot_represent_is_malformed_not_an_error(number: float) -> None:
    envelope = _envelope()
    envelope["overlay"]["candidates"][0]["score"] = number
    assert verify(envelope).reason == "malformed_structure"
    bare = copy.deepcopy(envelope["overlay"])
    assert verify(bare).reason == "malformed_structure"
