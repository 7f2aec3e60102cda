"""Issue 22.3: the gateway's pure planner (`grid.gateway.plan`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from grid.core.vocabulary import AdmissionState, SelectionTier
from grid.gateway.config import CredentialFile
from grid.gateway.plan import (
    CANDIDATE_HEADER,
    HOP_BY_HOP,
    NO_CANDIDATE,
    REQUEST_ID_HEADER,
    REVISION_HEADER,
    STRIPPED,
    CredentialRef,
    FailoverRule,
    Plan,
    PlanRules,
    Refusal,
    Routable,
    connection_tokens,
    end_to_end,
    plan_call,
    plan_request,
    routable,
)
from grid.gateway.snapshot import Candidate, SelectionFieldError, snapshot_from_candidates

TOKEN_REF = ("token", "grid-system", "key")
KEY_REF = ("key", "grid-system", "key")
RULES = PlanRules(
    model_field="model",
    model_header="X-Model",
    model_max_chars=64,
    session_max_chars=16,
    credentials={
        TOKEN_REF: CredentialFile("bearer_token", "/run/token"),
        KEY_REF: CredentialFile("api_key", "/run/key"),
    },
    usage_limits=(100_000, 1_000),
    stripped=STRIPPED | {"x-grid-tenant"},
)

names = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=8).map(lambda s: "x-" + s)
spelled = st.tuples(names, st.booleans()).map(lambda p: p[0].upper() if p[1] else p[0])
values = st.text("abcdefghij0123456789 =;/", max_size=12).map(str.strip)
headers = st.lists(st.tuples(spelled, values), max_size=12)


@st.composite
def with_connection(draw: st.DrawFn) -> tuple[CIMultiDict[str], set[str]]:
    """Headers, some of which one or more ``Connection`` headers name (any case, spacing)."""
    pairs = draw(headers)
    listed = draw(st.lists(spelled, max_size=4))
    listed += [n for n, _ in pairs if draw(st.booleans())]
    out = CIMultiDict(pairs)
    shuffled = draw(st.permutations(listed))
    for chunk in (shuffled[0::2], shuffled[1::2]):  # split over two Connection headers
        if chunk:
            out.add("Connection", " ,".join(f" {t} " for t in chunk))
    if draw(st.booleans()):
        out.add("Connection", "keep-alive")
    return out, {t.lower() for t in listed}


def candidate(index: int, credential: tuple[str, str, str] | None = None) -> Candidate:
    return Candidate(
        kind="inference_model",
        name="m",
        site=f"s{index}",
        cluster=f"c{index}",
        fresh=True,
        stable_id=f"id-{index}",
        admission=AdmissionState.NEW_AND_EXISTING,
        credential=credential,
    )


tries = st.lists(
    st.sampled_from([None, TOKEN_REF, KEY_REF, ("gone", "x", "y")]), min_size=1, max_size=4
).map(lambda refs: [candidate(i, r) for i, r in enumerate(refs)])


def _plan(client: CIMultiDict[str], chosen: list[Candidate], **body: Any) -> Plan | Refusal:
    document = {"model": "m", **body}
    parsed = routable(document, None, RULES)
    assert isinstance(parsed, Routable)
    raw = json.dumps(document).encode()
    return plan_request(client, "/v1/chat/completions", raw, parsed, chosen, RULES, "r-1", "rev")


@given(with_connection(), tries)
def test_connection_listed_headers_never_reach_the_cluster(
    drawn: tuple[CIMultiDict[str], set[str]], chosen: list[Candidate]
) -> None:
    client, listed = drawn
    plan = _plan(client, chosen)
    assert isinstance(plan, Plan)
    own = {CANDIDATE_HEADER, REQUEST_ID_HEADER, REVISION_HEADER, "accept-encoding", "x-model"}
    for attempt in plan.attempts:
        sent = {name.lower() for name in attempt.headers}
        assert not (sent & HOP_BY_HOP)
        assert not (sent & listed - own)


@given(headers, tries)
def test_repeated_headers_reach_the_cluster_in_order(
    pairs: list[tuple[str, str]], chosen: list[Candidate]
) -> None:
    plan = _plan(CIMultiDict(pairs), chosen)
    assert isinstance(plan, Plan)
    for attempt in plan.attempts:
        for name in {n.lower() for n, _ in pairs}:
            assert attempt.headers.getall(name) == [v for n, v in pairs if n.lower() == name]


@given(tries)
def test_attempts_follow_the_selection_order(chosen: list[Candidate]) -> None:
    plan = _plan(CIMultiDict(), chosen)
    assert isinstance(plan, Plan)
    assert [a.candidate for a in plan.attempts] == chosen
    assert [a.index for a in plan.attempts] == list(range(len(chosen)))
    for attempt in plan.attempts:
        assert attempt.headers.getall(CANDIDATE_HEADER) == [attempt.candidate.stable_id]
        assert attempt.headers.getall(REQUEST_ID_HEADER) == ["r-1"]


@given(tries)
def test_attempts_carry_credential_references_not_values(chosen: list[Candidate]) -> None:
    client = CIMultiDict([("Authorization", "Bearer client"), ("X-Api-Key", "client")])
    plan = _plan(client, chosen)
    assert isinstance(plan, Plan)
    for attempt in plan.attempts:
        assert "Authorization" not in attempt.headers and "x-api-key" not in attempt.headers
        ref = attempt.candidate.credential
        if ref is None:
            assert attempt.credential is None and attempt.blocked is None
        elif ref not in RULES.credentials:
            assert attempt.credential is None and attempt.blocked == "no_credential"
        else:
            assert attempt.credential == CredentialRef.of(RULES.credentials[ref])
    assert CredentialRef.of(RULES.credentials[TOKEN_REF]).inject("v") == (
        "Authorization",
        "Bearer v",
    )
    assert CredentialRef.of(RULES.credentials[KEY_REF]).inject("v") == ("x-api-key", "v")


@given(headers, st.sampled_from([None, True, False, "yes", 1]), st.booleans())
def test_a_refusal_never_has_attempts(
    pairs: list[tuple[str, str]], stream: object, selected: bool
) -> None:
    chosen = [candidate(0)] if selected else []
    plan = _plan(CIMultiDict(pairs), chosen, stream=stream)
    if not selected:
        assert plan == NO_CANDIDATE
    elif not (stream is None or isinstance(stream, bool)):
        assert isinstance(plan, Refusal) and plan.code == "invalid_stream"
    else:
        assert isinstance(plan, Plan) and len(plan.attempts) == 1
    if isinstance(plan, Refusal):
        assert not hasattr(plan, "attempts") and plan.status >= 400


def test_a_stream_asks_for_its_usage_without_changing_the_parsed_body() -> None:
    document: dict[str, Any] = {"model": "m", "stream": True}
    parsed = routable(document, None, RULES)
    assert isinstance(parsed, Routable)
    plan = plan_request(CIMultiDict(), "/t", b"{}", parsed, [candidate(0)], RULES, "r", None)
    assert isinstance(plan, Plan) and plan.strip_usage
    assert json.loads(plan.body)["stream_options"] == {"include_usage": True}
    assert document == {"model": "m", "stream": True}
    assert REVISION_HEADER not in plan.attempts[0].headers


@given(with_connection())
def test_response_headers_lose_the_connection_listed_ones(
    drawn: tuple[CIMultiDict[str], set[str]],
) -> None:
    answer, listed = drawn
    relayed = end_to_end(answer)
    assert not ({n.lower() for n in relayed} & (HOP_BY_HOP | listed))
    kept = [(n, v) for n, v in answer.items() if n.lower() not in HOP_BY_HOP | listed]
    assert list(relayed.items()) == kept
    assert connection_tokens(relayed) == frozenset()


def test_routable_refuses_an_unusable_model_and_drops_an_unusable_session() -> None:
    unusable: list[object] = [None, [], {}, {"model": " "}, {"model": 3}, {"model": "m" * 65}]
    for document in unusable:
        refused = routable(document, None, RULES)
        assert isinstance(refused, Refusal) and refused.code == "invalid_model"
    assert routable({"model": "m"}, "", RULES) == Routable("m", {"model": "m"}, None)
    assert routable({"model": "m"}, "s" * 17, RULES) == Routable("m", {"model": "m"}, None)
    assert routable({"model": "m"}, "s", RULES) == Routable("m", {"model": "m"}, "s")


def test_the_failover_rule_spares_the_last_attempt() -> None:
    rule = FailoverRule()
    assert rule.on_status(503, final=False) and rule.on_status(502, final=False)
    assert not rule.on_status(503, final=True)
    assert not rule.on_status(500, final=False) and not rule.on_status(200, final=False)


def test_candidates_carry_the_cores_admission_and_tier() -> None:
    raw = [
        {"kind": "inference_model", "name": "m", "site": s, "cluster": s, **extra}
        for s, extra in (
            ("a", {"admission_state": "none", "selection_tier": "unknown"}),
            ("b", {"admission_state": "existing_only", "selection_tier": "same_zone"}),
            ("c", {}),
        )
    ]
    a, b, c = snapshot_from_candidates(raw, None, "test").candidates
    assert (a.admission, a.tier) == (AdmissionState.EXCLUDED, SelectionTier.UNKNOWN)
    assert (b.admission, b.tier) == (AdmissionState.EXISTING_ONLY, SelectionTier.SAME_ZONE)
    assert (c.admission, c.tier) == (AdmissionState.NEW_AND_EXISTING, None)
    wired = [(x.wire()["admission_state"], x.wire()["selection_tier"]) for x in (a, b, c)]
    assert wired == [
        ("none", "unknown"),
        ("existing_only", "same_zone"),
        ("new_and_existing", None),
    ]


def test_a_candidate_naming_no_known_admission_or_tier_is_refused() -> None:
    base = {"kind": "inference_model", "name": "m", "site": "a", "cluster": "a"}
    for extra, field_name in (
        ({"admission_state": "sometimes"}, "admission_state"),
        ({"selection_tier": "gold"}, "selection_tier"),
    ):
        with pytest.raises(SelectionFieldError, match=rf"candidates\[0\]\.{field_name}"):
            snapshot_from_candidates([{**base, **extra}], None, "inline")


UNSERVED = Refusal(404, "no_candidate", "no candidate serves this tool", "no_candidate")


@given(with_connection(), st.lists(st.sampled_from([None, TOKEN_REF, KEY_REF]), max_size=3))
def test_a_tool_call_is_planned_as_a_model_request_is(
    drawn: tuple[CIMultiDict[str], set[str]], refs: list[tuple[str, str, str] | None]
) -> None:
    client, listed = drawn
    client.add("Mcp-Session-Id", "the-clients")
    client.add("Accept", "text/plain")
    chosen = [candidate(i, r) for i, r in enumerate(refs)]
    plan = plan_call(
        client, "/mcp", b'{"id": 1}', "tool", chosen, RULES, "r-1", None,
        unserved=UNSERVED, drop=("Mcp-Session-Id",), extra={"Accept": "application/json"},
    )  # fmt: skip
    if not chosen:
        assert plan is UNSERVED
        return
    assert isinstance(plan, Plan)
    assert plan.body == b'{"id": 1}' and not plan.strip_usage and plan.session is None
    assert [a.candidate for a in plan.attempts] == chosen
    for attempt in plan.attempts:
        sent = attempt.headers
        assert sent.getall("Accept") == ["application/json"]
        assert "Mcp-Session-Id" not in sent and sent.getall("X-Model") == ["tool"]
        assert not ({n.lower() for n in sent} & (HOP_BY_HOP | listed - {"accept", "x-model"}))
        held = attempt.with_header("Mcp-Session-Id", "the-gateways")
        assert held.headers.getall("Mcp-Session-Id") == ["the-gateways"]
        assert "Mcp-Session-Id" not in attempt.headers
