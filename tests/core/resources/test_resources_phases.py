"""Phase tables: every legal edge works, every illegal edge raises and changes nothing."""

from __future__ import annotations

import itertools

import pytest

from grid.core.resources import (
    AgentToAgentProviderStatus,
    AgentToolProviderStatus,
    GridNetworkStatus,
    GridSiteStatus,
    InferenceProviderStatus,
    NetworkPhase,
    ProviderPhase,
    SitePhase,
)
from grid.core.resources.phases import (
    NETWORK_TRANSITIONS,
    PHASE_ENUMS,
    PHASE_TABLES,
    PROVIDER_TRANSITIONS,
    SITE_TRANSITIONS,
    allowed_transitions,
    can_transition,
    transition,
)
from grid.errors import TransitionError

STATUS = {
    "GridNetwork": GridNetworkStatus,
    "GridSite": GridSiteStatus,
    "InferenceProvider": InferenceProviderStatus,
    "AgentToolProvider": AgentToolProviderStatus,
    "AgentToAgentProvider": AgentToAgentProviderStatus,
}

ALL_PAIRS = [
    (kind, src, dst)
    for kind, enum in PHASE_ENUMS.items()
    for src, dst in itertools.product(list(enum), repeat=2)
]


def is_legal(kind: str, src: str, dst: str) -> bool:
    table = PHASE_TABLES[kind]
    return src == dst or dst in {str(p) for p in table[PHASE_ENUMS[kind](src)]}


def test_forward_chains_are_seed_003s() -> None:
    chains = {
        "GridNetwork": ["Pending", "Initializing", "Active", "Degraded"],
        "GridSite": ["Pending", "Discovered", "Connecting", "Active", "Unreachable", "Left"],
        "InferenceProvider": ["Pending", "Available", "Degraded", "Unavailable"],
    }
    for kind, chain in chains.items():
        assert [p.value for p in PHASE_ENUMS[kind]] == chain
        for src, dst in itertools.pairwise(chain):
            assert transition(kind, src, dst) == dst


def test_documented_recovery_edges() -> None:
    assert NetworkPhase.ACTIVE in NETWORK_TRANSITIONS[NetworkPhase.DEGRADED]
    assert SITE_TRANSITIONS[SitePhase.UNREACHABLE] >= {SitePhase.CONNECTING, SitePhase.ACTIVE}
    assert SitePhase.LEFT in SITE_TRANSITIONS[SitePhase.ACTIVE]
    assert ProviderPhase.AVAILABLE in PROVIDER_TRANSITIONS[ProviderPhase.DEGRADED]
    assert ProviderPhase.AVAILABLE in PROVIDER_TRANSITIONS[ProviderPhase.UNAVAILABLE]


def test_no_shortcuts_past_the_seed_chain() -> None:
    for kind, src, dst in [
        ("GridSite", "Pending", "Active"),
        ("GridSite", "Discovered", "Active"),
        ("GridSite", "Pending", "Connecting"),
        ("GridNetwork", "Pending", "Active"),
        ("InferenceProvider", "Pending", "Degraded"),
        ("InferenceProvider", "Available", "Pending"),
    ]:
        assert not can_transition(kind, src, dst)


@pytest.mark.parametrize(("kind", "src", "dst"), ALL_PAIRS)
def test_every_edge_follows_the_table(kind: str, src: str, dst: str) -> None:
    status = STATUS[kind](phase=src)
    before = status.model_dump()
    if is_legal(kind, src, dst):
        assert transition(kind, src, dst) == dst
        status.transition_to(dst)
        assert status.phase == dst
    else:
        with pytest.raises(TransitionError) as info:
            transition(kind, src, dst)
        assert f"{src} -> {dst}" in str(info.value)
        with pytest.raises(TransitionError):
            status.transition_to(dst)
        assert status.model_dump() == before


def test_allowed_transitions_matches_the_table() -> None:
    assert allowed_transitions("GridSite", "Active") == {"Unreachable", "Left"}
    assert allowed_transitions("GridNetwork", "Pending") == {"Initializing"}


def test_unknown_kind_or_phase_raises() -> None:
    with pytest.raises(TransitionError):
        transition("Pod", "Pending", "Running")
    with pytest.raises(TransitionError):
        transition("GridSite", "Pending", "Running")
    with pytest.raises(TransitionError):
        transition("GridSite", "Sleeping", "Pending")


def test_set_condition_moves_transition_time_only_when_status_flips() -> None:
    status = GridNetworkStatus()
    t0, t1, t2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"
    assert status.set_condition("Ready", "False", reason="Starting", now=t0)
    assert status.set_condition("GatewayIngest", "True", reason="Clean", now=t0)
    assert not status.set_condition("Ready", "False", reason="Starting", now=t1)
    assert status.set_condition("Ready", "False", reason="Waiting", now=t1)
    ready = status.condition("Ready")
    assert ready is not None and ready.last_transition_time == t0
    assert status.set_condition("Ready", "True", reason="Active", now=t2)
    ready = status.condition("Ready")
    assert ready is not None and ready.last_transition_time == t2
    assert [c.type for c in status.conditions] == ["Ready", "GatewayIngest"]
