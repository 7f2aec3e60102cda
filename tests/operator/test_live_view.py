"""The operator's live view: its own member row, lanes from the replica, budgets from status."""

from __future__ import annotations

from pathlib import Path

from grid.cli.routing_cmd import _inputs, _signals
from grid.core.crdt.replica import GridState
from grid.core.resources.status import BudgetStatus, GridNetworkStatus
from grid.core.swim.effects import EventKind, Notify
from grid.operator.gateway_scrape import GatewayScrape, read_exposition
from grid.operator.live import OperatorLiveView

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def test_view_without_swim_shows_itself_and_its_lanes() -> None:
    live = OperatorLiveView("east", GridState("east", base_revision=7), lambda: None)
    view = live.view()
    assert view["sites"] == ["east"]
    assert view["members"] == [
        {"id": "east", "views": {"east": {"state": "alive", "incarnation": 0}}}
    ]
    assert {(r["origin"], r["revisions"]["east"]) for r in view["lanes"]} == {("east", 7)}
    assert view["budgets"] == {}


def test_budgets_come_from_the_network_status() -> None:
    network = _inputs(str(QUICKSTART)).networks[0]
    spend = BudgetStatus(tenant_id="acme", spend_usd=2.5, cap_usd=10.0, spend_ratio=0.25)
    network = network.model_copy(update={"status": GridNetworkStatus(budget_status=[spend])})
    live = OperatorLiveView("east", GridState("east"), lambda: None, lambda: network)
    assert live.view()["budgets"] == {
        "east": [{"tenantId": "acme", "spendUsd": 2.5, "capUsd": 10.0, "spendRatio": 0.25}]
    }


def test_membership_events_reach_the_activity_and_wake_streams() -> None:
    live = OperatorLiveView("east", GridState("east"), lambda: None)
    before = live.changes.version
    live.on_swim_event(Notify(EventKind.SUSPECT, "west", "127.0.0.1:1", 1))
    live.on_swim_event(Notify(EventKind.ALIVE, "west", "127.0.0.1:1", 2))
    assert live.changes.version == before + 2
    kinds = [a["kind"] for a in live.view()["activity"]]
    assert kinds == ["refuted", "suspect"]


def test_a_poll_mode_render_shows_the_gateways_scores(poll_quickstart: Path) -> None:
    live = OperatorLiveView("east", GridState("east"), lambda: None)
    live.on_render(_inputs(str(poll_quickstart)), _signals(str(QUICKSTART / "signals.json")))
    models = live.view()["ranking"]["east"]
    ranked = [c for m in models for c in m["candidates"] if c["rank"] is not None]
    assert ranked and all(m["scored_by"] == "gateway" for m in models)
    assert all(len(c["contributions"]) == 6 and c["score"] is not None for c in ranked)


def test_traffic_is_what_the_last_gateway_scrape_counted() -> None:
    text = """\
# TYPE grid_gateway_upstream_requests_total counter
grid_gateway_upstream_requests_total{cluster="east-vllm"} 4.0
grid_gateway_upstream_requests_total{cluster="west-vllm"} 1.0
"""
    scrape = GatewayScrape([], 1.0)
    live = OperatorLiveView("east", GridState("east"), lambda: None, traffic=scrape.traffic)
    assert live.view()["traffic"] == {"east": {}}
    gateway = read_exposition(text)
    scrape.set_counters({"http://127.0.0.1:1/metrics": gateway, "http://127.0.0.1:2/m": gateway})
    assert live.view()["traffic"] == {"east": {"east-vllm": 8, "west-vllm": 2}}


SELECTIONS = """\
# TYPE grid_gateway_selections_total counter
grid_gateway_selections_total{{cluster="vllm-east",group="0"}} {east}
grid_gateway_selections_total{{cluster="bedrock-llama",group="1"}} {bedrock}
grid_gateway_selections_total{{cluster="odd",group="x"}} 9.0
"""


def test_the_scoring_panel_shows_groups_and_last_minute_shares() -> None:
    now = [0.0]
    scrape = GatewayScrape([], 1.0, clock=lambda: now[0])
    live = OperatorLiveView(
        "east", GridState("east"), lambda: None, selections=scrape.recent_selections
    )
    live.on_render(_inputs(str(QUICKSTART)), _signals(str(QUICKSTART / "signals.json")))
    url = "http://127.0.0.1:1/metrics"
    scrape.set_counters({url: read_exposition(SELECTIONS.format(east=40, bedrock=0))})
    assert read_exposition(SELECTIONS.format(east=1, bedrock=2)).selections == {
        ("vllm-east", 0): 1,
        ("bedrock-llama", 1): 2,
    }
    now[0] = 10.0
    scrape.set_counters({url: read_exposition(SELECTIONS.format(east=46, bedrock=2))})
    (llama,) = [m for m in live.view()["ranking"]["east"] if m["model"] == "llama-3.1-8b-instruct"]
    assert (llama["selections"], llama["window_s"]) == (8, 60.0)
    by_cluster = {c["cluster"]: c for c in llama["candidates"]}
    assert by_cluster["vllm-east"]["group"] == 0
    assert by_cluster["vllm-east"]["group_reason"].startswith("group 0: the first group")
    assert (by_cluster["vllm-east"]["selections"], by_cluster["vllm-east"]["share"]) == (6, 0.75)
    assert (by_cluster["bedrock-llama"]["group"], by_cluster["bedrock-llama"]["share"]) == (1, 0.25)
    assert by_cluster["vllm-west"]["share"] == 0.0
    # A minute without growth: nothing selected, no share.
    now[0] = 200.0
    scrape.set_counters({url: read_exposition(SELECTIONS.format(east=46, bedrock=2))})
    (llama,) = [m for m in live.view()["ranking"]["east"] if m["model"] == "llama-3.1-8b-instruct"]
    assert llama["selections"] == 0
    assert all(c["share"] is None for c in llama["candidates"])
