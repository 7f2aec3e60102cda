"""The live view's model: site views, their merge, the event feed and the activity log."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from grid.cli import main
from grid.cli.routing_cmd import _inputs, _signals
from grid.core.live.activity import ActivityLog
from grid.core.live.feed import EVENT_TYPES, changed_events
from grid.core.live.view import SiteInputs, View, explain_all, merge_views, site_view
from grid.core.swim.members import Member, MemberState
from grid.core.vocabulary import SIGNAL_NAMES

QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart"
AT = "2026-01-01T00:00:00.000Z"


def quickstart_view(site: str) -> View:
    """The quickstart's view from ``site``, ranked from the same files ``grid explain`` reads."""
    inputs = _inputs(str(QUICKSTART))
    signals = _signals(str(QUICKSTART / "signals.json"))
    return site_view(SiteInputs(site, AT, 0, explanations=explain_all(inputs, site, signals)))


def cli_explain(site: str, model: str) -> dict[str, Any]:
    args = ["explain", "-f", str(QUICKSTART), "--site", site, "--model", model]
    args += ["--signals", str(QUICKSTART / "signals.json"), "-o", "json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_scoring_panel_carries_grid_explain_numbers_and_reasons() -> None:
    view = quickstart_view("east")
    models = view["ranking"]["east"]
    assert models, "the quickstart has models"
    compared = 0
    for model in models:
        cli = cli_explain("east", model["model"])
        assert len(cli["candidates"]) == len(model["candidates"])
        for shown, explained in zip(model["candidates"], cli["candidates"], strict=True):
            assert (shown["provider"], shown["site"]) == (explained["provider"], explained["site"])
            assert shown["reason"] == explained["reason"]
            assert shown["score"] == explained["score"]
            assert shown["admission"] == explained["admission_state"]
            assert shown["tier"] == explained["selection_tier"]
            breakdown = explained["score_breakdown"] or {}
            assert shown["contributions"] == {n: breakdown[n] for n in SIGNAL_NAMES if breakdown}
            if breakdown:
                assert sum(shown["contributions"].values()) == pytest.approx(shown["score"])
                compared += 1
    assert compared > 0


def test_positions_count_ranked_candidates_only() -> None:
    for model in quickstart_view("east")["ranking"]["east"]:
        ranked = [c for c in model["candidates"] if c["rank"] is not None]
        assert [c["position"] for c in ranked] == list(range(1, len(ranked) + 1))
        assert all(c["position"] is None for c in model["candidates"] if c["rank"] is None)


def test_no_credential_reaches_a_view() -> None:
    text = json.dumps(quickstart_view("east"))
    secrets = (QUICKSTART / "30-secrets.yaml").read_text()
    assert "secretRef" not in text and "credential" not in text
    for line in secrets.splitlines():
        key, _, value = line.strip().partition(":")
        if key in {"token", "apiKey", "api-key"} and value.strip():
            assert value.strip().strip('"') not in text


def _site(observer: str, members: dict[str, tuple[MemberState, int]], lanes: Any) -> View:
    table = [Member(m, f"{m}:1", inc, state) for m, (state, inc) in members.items()]
    return site_view(SiteInputs(observer, AT, 3, members=table, lanes=lanes))


def test_merge_lines_up_members_and_lanes_per_site() -> None:
    east = _site("east", {"west": (MemberState.SUSPECT, 2)}, {"west": {"state": 5}})
    west = _site("west", {"east": (MemberState.ALIVE, 3)}, {"west": {"state": 7}})
    merged = merge_views([east, west], AT, unreachable=["central", "east"])
    assert merged["sites"] == ["east", "west"]
    assert merged["unreachable"] == ["central"]
    rows = {m["id"]: m["views"] for m in merged["members"]}
    assert rows["west"] == {
        "east": {"state": "suspect", "incarnation": 2},
        "west": {"state": "alive", "incarnation": 3},
    }
    assert merged["lanes"] == [
        {"origin": "west", "lane": "state", "revisions": {"east": 5, "west": 7}}
    ]


views = st.builds(
    lambda obs, members, revs: _site(
        obs,
        {m: (MemberState.ALIVE, i) for i, m in enumerate(members)},
        {"a": {"state": revs}},
    ),
    st.sampled_from(["east", "west", "central", "north"]),
    st.lists(st.sampled_from(["east", "west", "x", "y"]), unique=True),
    st.integers(0, 10),
)


@given(st.lists(views, min_size=1, max_size=4))
def test_merge_is_order_independent_and_idempotent(parts: list[View]) -> None:
    unique = list({v["sites"][0]: v for v in parts}.values())
    once = merge_views(unique, AT)
    assert merge_views(list(reversed(unique)), AT) == once
    assert merge_views([once, *unique], AT) == once


def test_feed_sends_every_section_first_then_only_what_changed() -> None:
    first = _site("east", {"west": (MemberState.ALIVE, 0)}, {"east": {"state": 1}})
    events = changed_events(None, first)
    assert [e["type"] for e in events] == list(EVENT_TYPES)
    assert changed_events(first, first) == []
    later = _site("east", {"west": (MemberState.SUSPECT, 0)}, {"east": {"state": 1}})
    (event,) = changed_events(first, later)
    assert event["type"] == "members" and event["members"] == later["members"]


def test_activity_names_refutations_and_stays_bounded() -> None:
    log = ActivityLog("east", capacity=3)
    log.record("suspect", "west", 1, AT)
    assert log.record("alive", "west", 2, AT).kind == "refuted"
    assert log.record("alive", "west", 2, AT).kind == "alive"
    log.record("dead", "central", 0, AT)
    entries = log.entries()
    assert len(entries) == 3 and entries[0]["kind"] == "dead"
    with pytest.raises(ValueError):
        ActivityLog("east", capacity=0)


def test_a_poll_mode_view_has_the_gateways_bars(poll_quickstart: Path) -> None:
    """Under poll the operator does not score; the view asks for the gateway's scores."""
    inputs = _inputs(str(poll_quickstart))
    signals = _signals(str(QUICKSTART / "signals.json"))
    plain = site_view(SiteInputs("east", AT, 0, explanations=explain_all(inputs, "east", signals)))
    assert all(c["contributions"] == {} for m in plain["ranking"]["east"] for c in m["candidates"])
    explanations = explain_all(inputs, "east", signals, as_gateway=True)
    models = site_view(SiteInputs("east", AT, 0, explanations=explanations))["ranking"]["east"]
    assert models and all(m["scored_by"] == "gateway" for m in models)
    for model in models:
        args = ["explain", "-f", str(poll_quickstart), "--site", "east", "--model", model["model"]]
        args += ["--signals", str(QUICKSTART / "signals.json"), "--as-gateway", "-o", "json"]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        cli = json.loads(result.output)["candidates"]
        for shown, explained in zip(model["candidates"], cli, strict=True):
            assert shown["reason"] == explained["reason"]
            assert shown["score"] == explained["score"]
            if shown["rank"] is None:
                continue
            breakdown = explained["score_breakdown"]
            assert shown["contributions"] == {n: breakdown[n] for n in SIGNAL_NAMES}
            assert sum(shown["contributions"].values()) == pytest.approx(shown["score"])


STABILIZED = """  admissionPolicy:
    mode: stabilized
    pressure:
      enterThreshold: 0.6
      exitThreshold: 0.4
      failureThreshold: 2
      successThreshold: 3
      minimumStateDuration: 10s
      recoveryHoldDown: 30s
"""


def test_the_view_applies_the_render_rounds_stabilized_holds(tmp_path: Path) -> None:
    """A (site, provider) the hysteresis holds shows existing_only, as the overlay has it."""
    for source in QUICKSTART.glob("*.yaml"):
        text = source.read_text()
        if source.name == "00-network.yaml":
            seed_admission = text.index("  admission:\n")  # it would win over admissionPolicy
            end = text.index("  staleCandidateTtlSeconds:")
            text = text[:seed_admission] + STABILIZED + text[end:]
        (tmp_path / source.name).write_text(text)
    inputs = _inputs(str(tmp_path))
    signals = _signals(str(QUICKSTART / "signals.json"))

    def admissions(held: frozenset[tuple[str, str]] | None) -> dict[tuple[str, str], str]:
        return {
            (row.site, row.provider): row.admission_state
            for e in explain_all(inputs, "east", signals, held=held)
            for row in e.rows
            if row.status == "ranked"
        }

    free = admissions(None)
    target = next(k for k, state in sorted(free.items()) if state == "new_and_existing")
    held = admissions(frozenset({target}))
    # With a hold set the hysteresis alone decides: only the held pair is existing_only.
    assert held == {k: "existing_only" if k == target else "new_and_existing" for k in free}


def test_tools_and_agents_stand_beside_the_models_each_with_its_kind() -> None:
    inputs = _inputs(str(QUICKSTART))
    explained = explain_all(inputs, "east", _signals(str(QUICKSTART / "signals.json")))
    model = next(e for e in explained if e.rows and e.rows[0].kind == "inference_model")

    def as_kind(kind: str, name: str) -> Any:
        rows = tuple(dataclasses.replace(r, kind=kind, model=name) for r in model.rows)
        return dataclasses.replace(model, model=name, rows=rows)

    tool, agent = as_kind("mcp_tool", "aaa-search"), as_kind("a2a_agent", "aa-planner")
    view = site_view(SiteInputs("east", AT, 0, explanations=[agent, tool, *explained]))
    order = ["inference_model", "mcp_tool", "a2a_agent"]
    shown = [(order.index(m["kind"]), m["model"]) for m in view["ranking"]["east"]]
    assert shown == sorted(shown) and len(shown) == len(explained) + 2
    assert {kind for kind, _ in shown} == {0, 1, 2}
    for entry in view["ranking"]["east"]:
        assert {c["kind"] for c in entry["candidates"]} <= {entry["kind"]}
    json.dumps(view)
