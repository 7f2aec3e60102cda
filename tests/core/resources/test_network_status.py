"""The operator's GridNetwork status decisions: served gateways, overlay entries, patches.

A patch names only what differs, so a steady state writes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from grid.core.resources import API_VERSION, GridNetwork
from grid.core.resources.network_status import (
    RoundOutcome,
    overlay_entry,
    rendered_patch,
    served_gateways,
    start_patch,
)
from grid.core.resources.phases import SitePhase

FRESH = "0190a000-0000-7000-8000-000000000001"


def network(status: dict[str, Any] | None = None, **spec: Any) -> GridNetwork:
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "GridNetwork",
        "metadata": {"name": "net", "generation": 4},
        "spec": spec,
    }
    if status is not None:
        doc["status"] = status
    return GridNetwork.model_validate(doc)


def never() -> str:
    raise AssertionError("a fresh gridId was drawn though none was due")


def entry(gateway: str = "edge", revision: str = "ab" * 32) -> dict[str, Any]:
    return overlay_entry(
        gateway=gateway,
        namespace="grid",
        config_map=f"grid-overlay-net-{gateway}",
        revision=revision,
        candidates=3,
    )


# -- served gateways -----------------------------------------------------------------


def test_a_site_serves_its_own_gateways_and_those_without_a_site() -> None:
    net = network(
        gatewayRefs=[
            {"name": "anywhere"},
            {"name": "here", "localSiteName": "east"},
            {"name": "there", "localSiteName": "west"},
        ]
    )
    assert [r.name for r in served_gateways(net, "east")] == ["anywhere", "here"]
    assert [r.name for r in served_gateways(net, "west")] == ["anywhere", "there"]
    assert served_gateways(network(), "east") == []


def test_an_overlay_entry_reads_back_as_the_status_model() -> None:
    net = network(status={"overlays": [entry()]})
    assert net.status is not None
    [overlay] = net.status.overlays
    assert overlay.model_dump(by_alias=True, exclude_none=True) == entry()
    assert (overlay.config_map, overlay.candidate_count, overlay.phase) == (
        "grid-overlay-net-edge",
        3,
        "Rendered",
    )


# -- at start --------------------------------------------------------------------------


def test_first_join_draws_a_grid_id_and_starts_initializing() -> None:
    assert start_patch(network(), lambda: FRESH) == {
        "gridId": FRESH,
        "phase": "Initializing",
        "reason": "Starting",
        "observedGeneration": 4,
    }


def test_a_pinned_grid_id_wins_over_the_persisted_one() -> None:
    net = network({"phase": "Active", "gridId": "old"}, gridId="pinned")
    assert start_patch(net, never) == {"gridId": "pinned", "observedGeneration": 4}


def test_a_restart_keeps_the_persisted_grid_id_and_writes_nothing() -> None:
    assert start_patch(network({"phase": "Active", "gridId": "kept"}), never) == {}
    assert start_patch(network({"phase": "Initializing", "gridId": "p"}, gridId="p"), never) == {}


def test_a_pending_network_with_a_grid_id_only_moves_its_phase() -> None:
    patch = start_patch(network({"phase": "Pending", "gridId": "kept"}), never)
    assert patch == {"phase": "Initializing", "reason": "Starting", "observedGeneration": 4}


# -- after a render round --------------------------------------------------------------

NOW = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T00:05:00Z"
ONE = RoundOutcome(served=1)


def steady(net: GridNetwork, overlays: list[dict[str, Any]], phases: Any, outcome: Any) -> Any:
    """The network after its patch was applied (as the store would merge it)."""
    patch = rendered_patch(net, overlays, phases, outcome, NOW)
    status = net.status.model_dump(by_alias=True, exclude_none=True) if net.status else {}
    status.update(patch)
    return network(status)


def conditions(patch: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in patch["conditions"]}


def test_the_first_render_activates_and_lists_overlays_sites_and_conditions() -> None:
    net = network({"phase": "Initializing", "gridId": "g"})
    phases = {"east": SitePhase.ACTIVE, "west": SitePhase.ACTIVE, "far": SitePhase.CONNECTING}
    patch = rendered_patch(net, [entry()], phases, ONE, NOW)
    assert {k: v for k, v in patch.items() if k != "conditions"} == {
        "phase": "Active",
        "reason": "Rendered",
        "connectedSites": 2,
        "overlays": [entry()],
        "observedGeneration": 4,
    }
    assert conditions(patch) == {
        "OverlaysDistributed": ("True", "Rendered"),
        "SitesReachable": ("True", "AllReachable"),
        "SecretsResolved": ("True", "Resolved"),
        "Ready": ("True", "Active"),
    }
    assert all(c["lastTransitionTime"] == NOW for c in patch["conditions"])


def test_a_steady_state_writes_nothing_even_later() -> None:
    net = steady(network({"phase": "Active", "gridId": "g"}), [entry()], {}, ONE)
    assert rendered_patch(net, [entry()], {"east": SitePhase.ACTIVE}, ONE, LATER) == {
        "connectedSites": 1,
        "observedGeneration": 4,
    }
    net = steady(net, [entry()], {"east": SitePhase.ACTIVE}, ONE)
    assert rendered_patch(net, [entry()], {"east": SitePhase.ACTIVE}, ONE, LATER) == {}


def test_no_gateway_or_a_failed_render_never_activates_the_network() -> None:
    net = network({"phase": "Initializing", "gridId": "g"})
    for outcome, reason in [
        (RoundOutcome(served=0), "NoGateway"),
        (RoundOutcome(served=1, render_failed=("edge",)), "RenderFailed"),
        (RoundOutcome(served=1, write_failed=("edge",)), "WriteFailed"),
    ]:
        patch = rendered_patch(net, [], {}, outcome, NOW)
        assert "phase" not in patch
        assert conditions(patch)["OverlaysDistributed"] == ("False", reason)
        assert conditions(patch)["Ready"] == ("False", reason)


@pytest.mark.parametrize(
    ("outcome", "phases", "reason", "condition"),
    [
        (ONE, {"west": SitePhase.UNREACHABLE}, "SitesUnreachable", "SitesReachable"),
        (
            RoundOutcome(served=1, render_failed=("edge",)),
            {},
            "RenderFailed",
            "OverlaysDistributed",
        ),
        (RoundOutcome(served=1, write_failed=("edge",)), {}, "WriteFailed", "OverlaysDistributed"),
        (
            RoundOutcome(served=1, unreadable_secrets=("ns/key",)),
            {},
            "SecretUnreadable",
            "SecretsResolved",
        ),
    ],
)
def test_each_fault_degrades_with_its_reason_and_its_clearing_restores(
    outcome: RoundOutcome, phases: dict[str, SitePhase], reason: str, condition: str
) -> None:
    net = steady(network({"phase": "Active", "gridId": "g"}), [entry()], {}, ONE)
    patch = rendered_patch(net, [entry()], phases, outcome, LATER)
    assert (patch["phase"], patch["reason"]) == ("Degraded", reason)
    flipped = {c["type"]: c for c in patch["conditions"]}
    assert (flipped[condition]["status"], flipped[condition]["reason"]) == ("False", reason)
    assert flipped[condition]["lastTransitionTime"] == LATER
    assert flipped["Ready"]["status"] == "False"
    degraded = steady(net, [entry()], phases, outcome)
    assert rendered_patch(degraded, [entry()], phases, outcome, LATER) == {}
    back = rendered_patch(degraded, [entry()], {}, ONE, LATER)
    assert (back["phase"], back["reason"]) == ("Active", "Rendered")


def test_only_a_changed_overlay_list_is_written() -> None:
    net = steady(network({"phase": "Active", "connectedSites": 0}), [entry()], {}, ONE)
    changed = [entry(revision="cd" * 32), entry("second")]
    patch = rendered_patch(net, changed, {}, RoundOutcome(served=2), NOW)
    assert patch["overlays"] == changed
    assert "phase" not in patch
