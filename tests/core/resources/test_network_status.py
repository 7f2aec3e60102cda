"""The operator's GridNetwork status decisions: served gateways, overlay entries, patches.

A patch names only what differs, so a steady state writes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from grid.core.resources import API_VERSION, GridNetwork
from grid.core.resources.network_status import (
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


def test_the_first_render_activates_and_lists_overlays_and_sites() -> None:
    net = network({"phase": "Initializing", "gridId": "g"})
    phases = {"east": SitePhase.ACTIVE, "west": SitePhase.ACTIVE, "far": SitePhase.CONNECTING}
    assert rendered_patch(net, [entry()], phases) == {
        "phase": "Active",
        "reason": "Rendered",
        "connectedSites": 2,
        "overlays": [entry()],
        "observedGeneration": 4,
    }


def test_a_steady_state_writes_nothing() -> None:
    net = network({"phase": "Active", "gridId": "g", "connectedSites": 1, "overlays": [entry()]})
    assert rendered_patch(net, [entry()], {"east": SitePhase.ACTIVE}) == {}


@pytest.mark.parametrize(
    ("phase", "phases", "wanted"),
    [
        ("Active", {"east": SitePhase.ACTIVE, "west": SitePhase.UNREACHABLE}, "Degraded"),
        ("Degraded", {"east": SitePhase.ACTIVE}, "Active"),
    ],
)
def test_unreachable_sites_degrade_and_their_return_restores(
    phase: str, phases: dict[str, SitePhase], wanted: str
) -> None:
    net = network({"phase": phase, "connectedSites": 1, "overlays": [entry()]})
    patch = rendered_patch(net, [entry()], phases)
    reason = "SitesUnreachable" if wanted == "Degraded" else "Rendered"
    assert patch == {"phase": wanted, "reason": reason, "observedGeneration": 4}


def test_only_a_changed_overlay_list_is_written() -> None:
    net = network({"phase": "Active", "connectedSites": 0, "overlays": [entry()]})
    changed = [entry(revision="cd" * 32), entry("second")]
    assert rendered_patch(net, changed, {}) == {"overlays": changed, "observedGeneration": 4}
    assert rendered_patch(net, [], {}) == {"overlays": [], "observedGeneration": 4}
