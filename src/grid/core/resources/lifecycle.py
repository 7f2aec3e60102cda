"""Phase decisions: what the controllers' observations mean for each resource's phase.

The phase tables in `grid.core.resources.phases` say which moves are legal; this module
says which move the observations call for. Both machines are pure: they take
the current phase and what was observed, and return the next phase, stepping
only along legal edges (an Available provider whose health check fails goes
to Degraded first, and to Unavailable only when the failure persists).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from grid.core.resources.phases import NetworkPhase, ProviderPhase, SitePhase, transition
from grid.core.swim.members import MemberState

UNAVAILABLE_AFTER_FAILURES = 2
"""Consecutive failed health checks before a provider is Unavailable. One failure
only degrades it, so a single lost probe does not drop it from routing."""


@dataclass(frozen=True)
class ProviderObservation:
    """One round of checks of a provider.

    ``health_ok`` is the health check's verdict (None when the provider has no
    health endpoint to check); ``metrics_ok`` whether its scrape succeeded (None
    without metrics); ``failures`` counts consecutive failed health checks.
    """

    health_ok: bool | None
    metrics_ok: bool | None
    failures: int = 0


def next_provider_phase(current: ProviderPhase, seen: ProviderObservation) -> ProviderPhase:
    """The provider phase the observation calls for, reached by one legal step."""
    if seen.health_ok is False:
        wanted = (
            ProviderPhase.UNAVAILABLE
            if seen.failures >= UNAVAILABLE_AFTER_FAILURES
            else ProviderPhase.DEGRADED
        )
        # A failed check never improves a phase: Pending waits for a first success,
        # and Unavailable stays put even when a restarted loop counts from zero.
        if current in (ProviderPhase.PENDING, ProviderPhase.UNAVAILABLE):
            return current
    elif seen.metrics_ok is False:
        wanted = ProviderPhase.DEGRADED
        if current is ProviderPhase.PENDING:
            wanted = ProviderPhase.AVAILABLE
    else:
        wanted = ProviderPhase.AVAILABLE
    if current is ProviderPhase.AVAILABLE and wanted is ProviderPhase.UNAVAILABLE:
        wanted = ProviderPhase.DEGRADED
    return ProviderPhase(transition("InferenceProvider", current, wanted))


class Probe(enum.StrEnum):
    """The outcome of a GridSite's egress probe."""

    NOT_RUN = "not_run"
    PASSED = "passed"
    UNREACHABLE = "unreachable"
    FINGERPRINT_MISMATCH = "fingerprint_mismatch"
    IDENTITY_UNVERIFIED = "identity_unverified"
    """A plaintext egress answered a TCP connect: reachable, but no identity was proven,
    so the site is never verified by it (upstream's ``IdentityVerificationRequired``)."""


LEFT_AFTER_DEAD_S = 300.0
"""Seconds a member must stay dead before its site is Left, when the network sets
no ``staleCandidateTtlSeconds``. Long enough that a restart or a network blip
keeps the GridSite's history; short enough that the grid forgets a crashed site."""


def departed(state: MemberState | None, dead_for_s: float | None, ttl_s: float | None) -> bool:
    """Whether a site's member is gone: it left gracefully, or was dead for the TTL.

    ``dead_for_s`` is how long the member has been declared dead (None when it is
    not dead); a suspect member is never departed. ``ttl_s`` is the network's
    ``staleCandidateTtlSeconds`` (None: `LEFT_AFTER_DEAD_S`).
    """
    if state is MemberState.LEFT:
        return True
    if state is not MemberState.DEAD or dead_for_s is None:
        return False
    return dead_for_s >= (LEFT_AFTER_DEAD_S if ttl_s is None else ttl_s)


@dataclass(frozen=True)
class SiteObservation:
    """What an operator knows about one peer site right now.

    ``swim_left`` means the member departed (`departed`): it left gracefully, or
    it has been dead for the TTL.
    """

    auto_discover: bool
    swim_alive: bool
    swim_left: bool
    egress_known: bool
    probe: Probe = Probe.NOT_RUN


_DEPARTABLE = (SitePhase.DISCOVERED, SitePhase.CONNECTING, SitePhase.ACTIVE, SitePhase.UNREACHABLE)


def next_site_phase(current: SitePhase, seen: SiteObservation) -> SitePhase:
    """The GridSite phase the observation calls for, by one legal step at most."""
    if seen.swim_left and current in _DEPARTABLE:
        return SitePhase(transition("GridSite", current, SitePhase.LEFT))
    wanted = current
    if current in (SitePhase.PENDING, SitePhase.LEFT):
        if seen.swim_alive and seen.auto_discover and not seen.swim_left:
            wanted = SitePhase.DISCOVERED
    elif current is SitePhase.DISCOVERED:
        if seen.egress_known:
            wanted = SitePhase.CONNECTING
    elif current is SitePhase.CONNECTING:
        if seen.probe is Probe.PASSED:
            wanted = SitePhase.ACTIVE
    elif current is SitePhase.ACTIVE:
        if seen.probe in (Probe.UNREACHABLE, Probe.FINGERPRINT_MISMATCH, Probe.IDENTITY_UNVERIFIED):
            wanted = SitePhase.UNREACHABLE
    elif current is SitePhase.UNREACHABLE and seen.probe is Probe.PASSED:
        wanted = SitePhase.ACTIVE
    return SitePhase(transition("GridSite", current, wanted))


def next_network_phase(
    current: NetworkPhase,
    *,
    started: bool,
    rendered: bool,
    unreachable_sites: int,
    faults: int = 0,
) -> NetworkPhase:
    """Pending -> Initializing once the mesh starts, Active once every served
    gateway's overlay is rendered and written, Degraded while an overlay fails,
    a peer site is Unreachable or another fault (an unreadable Secret) holds."""
    wanted = current
    trouble = not rendered or unreachable_sites > 0 or faults > 0
    if current is NetworkPhase.PENDING and started:
        wanted = NetworkPhase.INITIALIZING
    elif current is NetworkPhase.INITIALIZING and rendered:
        wanted = NetworkPhase.ACTIVE
    elif current is NetworkPhase.ACTIVE and trouble:
        wanted = NetworkPhase.DEGRADED
    elif current is NetworkPhase.DEGRADED and not trouble:
        wanted = NetworkPhase.ACTIVE
    return NetworkPhase(transition("GridNetwork", current, wanted))
