"""Phase decisions: what each observation makes of a provider, site or network phase.

Every decision must be one legal step of the phase tables; a burst of bad news
walks a resource down one edge at a time, never jumping.
"""

from __future__ import annotations

import itertools

import pytest

from grid.core.resources.lifecycle import (
    LEFT_AFTER_DEAD_S,
    UNAVAILABLE_AFTER_FAILURES,
    Probe,
    ProviderObservation,
    SiteObservation,
    departed,
    next_network_phase,
    next_provider_phase,
    next_site_phase,
)
from grid.core.resources.phases import (
    SITE_TRANSITIONS,
    NetworkPhase,
    ProviderPhase,
    SitePhase,
    can_transition,
)
from grid.core.swim.members import MemberState

# -- providers -----------------------------------------------------------------------

HEALTHY = ProviderObservation(health_ok=True, metrics_ok=True)
UNCHECKED = ProviderObservation(health_ok=None, metrics_ok=None)
METRICS_FAILING = ProviderObservation(health_ok=True, metrics_ok=False)


def failing(failures: int, metrics_ok: bool | None = True) -> ProviderObservation:
    """A failed health check, the ``failures``-th in a row."""
    return ProviderObservation(health_ok=False, metrics_ok=metrics_ok, failures=failures)


def test_a_healthy_pending_provider_becomes_available() -> None:
    assert next_provider_phase(ProviderPhase.PENDING, HEALTHY) is ProviderPhase.AVAILABLE


def test_a_provider_without_checks_becomes_and_stays_available() -> None:
    assert next_provider_phase(ProviderPhase.PENDING, UNCHECKED) is ProviderPhase.AVAILABLE
    assert next_provider_phase(ProviderPhase.AVAILABLE, UNCHECKED) is ProviderPhase.AVAILABLE


@pytest.mark.parametrize("failures", [1, UNAVAILABLE_AFTER_FAILURES, 10])
def test_a_pending_provider_stays_pending_while_its_health_check_fails(failures: int) -> None:
    assert next_provider_phase(ProviderPhase.PENDING, failing(failures)) is ProviderPhase.PENDING


def test_one_failed_health_check_only_degrades_an_available_provider() -> None:
    assert next_provider_phase(ProviderPhase.AVAILABLE, failing(1)) is ProviderPhase.DEGRADED


def test_an_available_provider_steps_through_degraded_even_after_many_failures() -> None:
    seen = failing(UNAVAILABLE_AFTER_FAILURES + 5)
    assert next_provider_phase(ProviderPhase.AVAILABLE, seen) is ProviderPhase.DEGRADED


def test_degraded_becomes_unavailable_only_at_the_failure_threshold() -> None:
    below = failing(UNAVAILABLE_AFTER_FAILURES - 1)
    at = failing(UNAVAILABLE_AFTER_FAILURES)
    assert next_provider_phase(ProviderPhase.DEGRADED, below) is ProviderPhase.DEGRADED
    assert next_provider_phase(ProviderPhase.DEGRADED, at) is ProviderPhase.UNAVAILABLE


def test_consecutive_failures_walk_available_to_unavailable_one_edge_at_a_time() -> None:
    phase = ProviderPhase.AVAILABLE
    walked = [phase]
    for failures in range(1, UNAVAILABLE_AFTER_FAILURES + 3):
        phase = next_provider_phase(phase, failing(failures))
        walked.append(phase)
    assert walked[:3] == [
        ProviderPhase.AVAILABLE,
        ProviderPhase.DEGRADED,
        ProviderPhase.UNAVAILABLE,
    ]
    assert set(walked[2:]) == {ProviderPhase.UNAVAILABLE}


@pytest.mark.parametrize("failures", [0, 1, UNAVAILABLE_AFTER_FAILURES, 7])
def test_an_unavailable_provider_stays_unavailable_while_health_fails(failures: int) -> None:
    # A restarted check loop counts from zero again; a failure must never read as
    # an improvement (Unavailable -> Degraded).
    seen = failing(failures)
    assert next_provider_phase(ProviderPhase.UNAVAILABLE, seen) is ProviderPhase.UNAVAILABLE


@pytest.mark.parametrize("current", [ProviderPhase.DEGRADED, ProviderPhase.UNAVAILABLE])
def test_a_passing_health_check_recovers_to_available(current: ProviderPhase) -> None:
    assert next_provider_phase(current, HEALTHY) is ProviderPhase.AVAILABLE


def test_a_failing_scrape_degrades_an_available_provider_but_never_makes_it_unavailable() -> None:
    assert next_provider_phase(ProviderPhase.AVAILABLE, METRICS_FAILING) is ProviderPhase.DEGRADED
    assert next_provider_phase(ProviderPhase.DEGRADED, METRICS_FAILING) is ProviderPhase.DEGRADED
    assert next_provider_phase(ProviderPhase.UNAVAILABLE, METRICS_FAILING) is ProviderPhase.DEGRADED


def test_a_failing_scrape_of_a_pending_provider_with_good_health_makes_it_available() -> None:
    # Pending -> Degraded is no legal edge; the provider answers, so it is Available
    # and a continued scrape failure degrades it on the next round.
    phase = next_provider_phase(ProviderPhase.PENDING, METRICS_FAILING)
    assert phase is ProviderPhase.AVAILABLE
    assert next_provider_phase(phase, METRICS_FAILING) is ProviderPhase.DEGRADED


PROVIDER_OBSERVATIONS = [
    ProviderObservation(health, metrics, failures)
    for health in (True, False, None)
    for metrics in (True, False, None)
    for failures in (0, 1, UNAVAILABLE_AFTER_FAILURES, 5)
]


@pytest.mark.parametrize("current", list(ProviderPhase))
def test_every_provider_decision_is_a_legal_step(current: ProviderPhase) -> None:
    for seen in PROVIDER_OBSERVATIONS:
        target = next_provider_phase(current, seen)
        assert can_transition("InferenceProvider", current, target), (current, seen, target)


# -- sites ---------------------------------------------------------------------------


def site(
    *,
    auto_discover: bool = True,
    alive: bool = True,
    left: bool = False,
    egress: bool = True,
    probe: Probe = Probe.NOT_RUN,
) -> SiteObservation:
    """A site observation with every condition for progress met unless overridden."""
    return SiteObservation(auto_discover, alive, left, egress, probe)


def test_pending_becomes_discovered_with_the_label_and_a_live_swim_member() -> None:
    assert next_site_phase(SitePhase.PENDING, site()) is SitePhase.DISCOVERED


def test_pending_stays_pending_without_the_auto_discover_label() -> None:
    assert next_site_phase(SitePhase.PENDING, site(auto_discover=False)) is SitePhase.PENDING


def test_pending_stays_pending_until_swim_sees_the_member_alive() -> None:
    assert next_site_phase(SitePhase.PENDING, site(alive=False)) is SitePhase.PENDING


def test_pending_stays_pending_when_swim_says_the_member_left() -> None:
    assert next_site_phase(SitePhase.PENDING, site(left=True)) is SitePhase.PENDING


def test_discovered_becomes_connecting_only_with_an_egress_address() -> None:
    assert next_site_phase(SitePhase.DISCOVERED, site(egress=False)) is SitePhase.DISCOVERED
    assert next_site_phase(SitePhase.DISCOVERED, site()) is SitePhase.CONNECTING


@pytest.mark.parametrize("probe", [Probe.NOT_RUN, Probe.UNREACHABLE, Probe.FINGERPRINT_MISMATCH])
def test_connecting_stays_connecting_unless_the_probe_passed(probe: Probe) -> None:
    assert next_site_phase(SitePhase.CONNECTING, site(probe=probe)) is SitePhase.CONNECTING


def test_connecting_becomes_active_when_the_probe_passed() -> None:
    assert next_site_phase(SitePhase.CONNECTING, site(probe=Probe.PASSED)) is SitePhase.ACTIVE


def test_a_fingerprint_mismatch_never_activates_a_site_from_any_phase() -> None:
    observations = [
        SiteObservation(auto, alive, left, egress, Probe.FINGERPRINT_MISMATCH)
        for auto, alive, left, egress in itertools.product((True, False), repeat=4)
    ]
    for current in SitePhase:
        for seen in observations:
            if current is SitePhase.ACTIVE:
                continue
            assert next_site_phase(current, seen) is not SitePhase.ACTIVE, (current, seen)


@pytest.mark.parametrize("probe", [Probe.UNREACHABLE, Probe.FINGERPRINT_MISMATCH])
def test_active_becomes_unreachable_when_the_probe_fails(probe: Probe) -> None:
    assert next_site_phase(SitePhase.ACTIVE, site(probe=probe)) is SitePhase.UNREACHABLE


def test_active_stays_active_while_the_probe_passes() -> None:
    assert next_site_phase(SitePhase.ACTIVE, site(probe=Probe.PASSED)) is SitePhase.ACTIVE


@pytest.mark.parametrize("current", [SitePhase.ACTIVE, SitePhase.UNREACHABLE])
def test_a_swim_leave_moves_active_or_unreachable_to_left(current: SitePhase) -> None:
    seen = site(alive=False, left=True, probe=Probe.PASSED)
    assert next_site_phase(current, seen) is SitePhase.LEFT


def test_an_unreachable_site_returns_to_active_only_on_a_passing_probe() -> None:
    for probe in (Probe.NOT_RUN, Probe.UNREACHABLE, Probe.FINGERPRINT_MISMATCH):
        assert next_site_phase(SitePhase.UNREACHABLE, site(probe=probe)) is SitePhase.UNREACHABLE
    assert next_site_phase(SitePhase.UNREACHABLE, site(probe=Probe.PASSED)) is SitePhase.ACTIVE


def test_a_site_that_left_is_discovered_again_when_swim_sees_it_alive() -> None:
    assert next_site_phase(SitePhase.LEFT, site(left=True, alive=False)) is SitePhase.LEFT
    assert next_site_phase(SitePhase.LEFT, site()) is SitePhase.DISCOVERED


def test_one_round_with_every_condition_met_moves_a_site_one_step_only() -> None:
    seen = site(probe=Probe.PASSED)
    walked = [SitePhase.PENDING]
    for _ in range(4):
        walked.append(next_site_phase(walked[-1], seen))
    assert walked == [
        SitePhase.PENDING,
        SitePhase.DISCOVERED,
        SitePhase.CONNECTING,
        SitePhase.ACTIVE,
        SitePhase.ACTIVE,
    ]


SITE_OBSERVATIONS = [
    SiteObservation(auto, alive, left, egress, probe)
    for auto, alive, left, egress in itertools.product((True, False), repeat=4)
    for probe in Probe
]


@pytest.mark.parametrize("current", list(SitePhase))
def test_every_site_decision_is_a_legal_step(current: SitePhase) -> None:
    for seen in SITE_OBSERVATIONS:
        target = next_site_phase(current, seen)
        assert can_transition("GridSite", current, target), (current, seen, target)


# -- networks ------------------------------------------------------------------------


def test_a_network_walks_pending_initializing_active_degraded_active() -> None:
    phase = NetworkPhase.PENDING
    phase = next_network_phase(phase, started=False, rendered=False, unreachable_sites=0)
    assert phase is NetworkPhase.PENDING
    phase = next_network_phase(phase, started=True, rendered=False, unreachable_sites=0)
    assert phase is NetworkPhase.INITIALIZING
    phase = next_network_phase(phase, started=True, rendered=False, unreachable_sites=0)
    assert phase is NetworkPhase.INITIALIZING
    phase = next_network_phase(phase, started=True, rendered=True, unreachable_sites=0)
    assert phase is NetworkPhase.ACTIVE
    phase = next_network_phase(phase, started=True, rendered=True, unreachable_sites=2)
    assert phase is NetworkPhase.DEGRADED
    phase = next_network_phase(phase, started=True, rendered=True, unreachable_sites=1)
    assert phase is NetworkPhase.DEGRADED
    phase = next_network_phase(phase, started=True, rendered=True, unreachable_sites=0)
    assert phase is NetworkPhase.ACTIVE


def test_a_network_takes_one_step_per_decision_even_when_everything_is_ready() -> None:
    phase = next_network_phase(
        NetworkPhase.PENDING, started=True, rendered=True, unreachable_sites=3
    )
    assert phase is NetworkPhase.INITIALIZING
    phase = next_network_phase(phase, started=True, rendered=True, unreachable_sites=3)
    assert phase is NetworkPhase.ACTIVE


@pytest.mark.parametrize("current", list(NetworkPhase))
def test_every_network_decision_is_a_legal_step(current: NetworkPhase) -> None:
    for started, rendered, unreachable in itertools.product((True, False), (True, False), (0, 1)):
        target = next_network_phase(
            current, started=started, rendered=rendered, unreachable_sites=unreachable
        )
        assert can_transition("GridNetwork", current, target), (current, target)


# -- departure: Left after a graceful leave, or dead for the TTL ------------------


@pytest.mark.parametrize(
    "current",
    [SitePhase.DISCOVERED, SitePhase.CONNECTING, SitePhase.ACTIVE, SitePhase.UNREACHABLE],
)
def test_every_phase_of_a_seen_site_moves_to_left_when_the_member_departed(
    current: SitePhase,
) -> None:
    assert next_site_phase(current, site(alive=False, left=True)) is SitePhase.LEFT


def test_a_left_site_that_rejoins_alive_returns_through_discovered() -> None:
    assert next_site_phase(SitePhase.LEFT, site()) is SitePhase.DISCOVERED
    assert next_site_phase(SitePhase.DISCOVERED, site()) is SitePhase.CONNECTING


def test_every_edge_of_the_site_table_is_reached_by_some_observation() -> None:
    observations = [
        SiteObservation(auto, alive, left, egress, probe)
        for auto, alive, left, egress in itertools.product((True, False), repeat=4)
        for probe in Probe
    ]
    reached = {
        (current, next_site_phase(current, seen)) for current in SitePhase for seen in observations
    }
    edges = {(src, dst) for src, targets in SITE_TRANSITIONS.items() for dst in targets}
    # Unreachable -> Connecting is the table's edge for a changed egress, taken by a
    # person's edit (the status writer), not by an observation.
    assert edges - reached == {(SitePhase.UNREACHABLE, SitePhase.CONNECTING)}
    assert {(a, b) for a, b in reached if a is not b} <= edges


def test_a_graceful_leave_departs_at_once() -> None:
    assert departed(MemberState.LEFT, None, None)
    assert departed(MemberState.LEFT, None, 3600)


def test_a_dead_member_departs_after_the_ttl_or_300_seconds_when_unset() -> None:
    assert not departed(MemberState.DEAD, 299.9, None)
    assert departed(MemberState.DEAD, LEFT_AFTER_DEAD_S, None)
    assert not departed(MemberState.DEAD, 29.0, 30)
    assert departed(MemberState.DEAD, 30.0, 30)


@pytest.mark.parametrize("state", [MemberState.ALIVE, MemberState.SUSPECT, None])
def test_a_suspect_alive_or_unknown_member_never_departs(state: MemberState | None) -> None:
    assert not departed(state, 10_000.0, 1)
