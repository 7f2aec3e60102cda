"""Phase tables of Grid's three custom resources, and the one way to move between phases.

Transitions are data (CONVENTIONS §2): each kind has a table mapping a phase to the
phases it may move to. `transition` consults the table and either returns the target
or raises `TransitionError`, changing nothing. Staying in the same phase is always
allowed and is a no-op, so a reconcile loop can request the phase it computed without
first comparing; the status writer then sees that nothing changed and writes nothing.

The forward chains are seed 003's exactly. The recovery edges (documented in
docs/resources.md) are the smallest set that lets a resource come back after the
condition that degraded it clears.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from grid.errors import TransitionError


class NetworkPhase(StrEnum):
    """Lifecycle of a GridNetwork: Pending -> Initializing -> Active -> Degraded."""

    PENDING = "Pending"
    INITIALIZING = "Initializing"
    ACTIVE = "Active"
    DEGRADED = "Degraded"


class SitePhase(StrEnum):
    """Lifecycle of a GridSite: Pending, Discovered, Connecting, Active, Unreachable, Left."""

    PENDING = "Pending"
    DISCOVERED = "Discovered"
    CONNECTING = "Connecting"
    ACTIVE = "Active"
    UNREACHABLE = "Unreachable"
    LEFT = "Left"


class ProviderPhase(StrEnum):
    """Lifecycle of an InferenceProvider: Pending -> Available -> Degraded -> Unavailable."""

    PENDING = "Pending"
    AVAILABLE = "Available"
    DEGRADED = "Degraded"
    UNAVAILABLE = "Unavailable"


Phase = NetworkPhase | SitePhase | ProviderPhase

NETWORK_TRANSITIONS: Final[Mapping[NetworkPhase, frozenset[NetworkPhase]]] = {
    NetworkPhase.PENDING: frozenset({NetworkPhase.INITIALIZING}),
    NetworkPhase.INITIALIZING: frozenset({NetworkPhase.ACTIVE}),
    NetworkPhase.ACTIVE: frozenset({NetworkPhase.DEGRADED}),
    # Recovery: the condition that degraded the network cleared.
    NetworkPhase.DEGRADED: frozenset({NetworkPhase.ACTIVE}),
}
"""Allowed GridNetwork phase changes (current -> possible targets)."""

SITE_TRANSITIONS: Final[Mapping[SitePhase, frozenset[SitePhase]]] = {
    # SWIM saw the peer alive and the site carries the auto-discover label.
    SitePhase.PENDING: frozenset({SitePhase.DISCOVERED}),
    # The egress address is known; or the member departed (dead for the TTL, or left).
    SitePhase.DISCOVERED: frozenset({SitePhase.CONNECTING, SitePhase.LEFT}),
    # TCP probe passed and the certificate fingerprint matched; or the member departed.
    SitePhase.CONNECTING: frozenset({SitePhase.ACTIVE, SitePhase.LEFT}),
    # Active -> Unreachable on probe failure; Active -> Left when the member departed.
    SitePhase.ACTIVE: frozenset({SitePhase.UNREACHABLE, SitePhase.LEFT}),
    # Recovery: the probe passes again (fingerprint still pinned) or is re-attempted
    # after a changed egress; or SWIM declares the member gone for good.
    SitePhase.UNREACHABLE: frozenset({SitePhase.CONNECTING, SitePhase.ACTIVE, SitePhase.LEFT}),
    # A site that left and rejoins is observed by SWIM again.
    SitePhase.LEFT: frozenset({SitePhase.DISCOVERED}),
}
"""Allowed GridSite phase changes (current -> possible targets)."""

PROVIDER_TRANSITIONS: Final[Mapping[ProviderPhase, frozenset[ProviderPhase]]] = {
    ProviderPhase.PENDING: frozenset({ProviderPhase.AVAILABLE}),
    ProviderPhase.AVAILABLE: frozenset({ProviderPhase.DEGRADED}),
    # Degraded recovers to Available or worsens to Unavailable.
    ProviderPhase.DEGRADED: frozenset({ProviderPhase.UNAVAILABLE, ProviderPhase.AVAILABLE}),
    # Recovery: health returns fully (Available) or partially (Degraded).
    ProviderPhase.UNAVAILABLE: frozenset({ProviderPhase.AVAILABLE, ProviderPhase.DEGRADED}),
}
"""Allowed InferenceProvider phase changes (current -> possible targets)."""

PHASE_TABLES: Final[Mapping[str, Mapping[StrEnum, frozenset[StrEnum]]]] = {
    "GridNetwork": NETWORK_TRANSITIONS,  # type: ignore[dict-item]
    "GridSite": SITE_TRANSITIONS,  # type: ignore[dict-item]
    "InferenceProvider": PROVIDER_TRANSITIONS,  # type: ignore[dict-item]
    # The agent kinds follow InferenceProvider's phases (§16).
    "AgentToolProvider": PROVIDER_TRANSITIONS,  # type: ignore[dict-item]
    "AgentToAgentProvider": PROVIDER_TRANSITIONS,  # type: ignore[dict-item]
}
"""Phase table of each kind, keyed by kind name."""

PHASE_ENUMS: Final[Mapping[str, type[StrEnum]]] = {
    "GridNetwork": NetworkPhase,
    "GridSite": SitePhase,
    "InferenceProvider": ProviderPhase,
    "AgentToolProvider": ProviderPhase,
    "AgentToAgentProvider": ProviderPhase,
}
"""Phase enum of each kind, keyed by kind name."""


def allowed_transitions(kind: str, current: str) -> frozenset[str]:
    """The phases `kind` may move to from `current` (excluding the no-op self edge)."""
    enum = _phase_enum(kind)
    return frozenset(str(p) for p in PHASE_TABLES[kind][_coerce(kind, enum, current)])


def can_transition(kind: str, current: str, target: str) -> bool:
    """Whether `current -> target` is legal for `kind` (a same-phase request is legal)."""
    try:
        transition(kind, current, target)
    except TransitionError:
        return False
    return True


def transition(kind: str, current: str, target: str) -> StrEnum:
    """Return `target` as the kind's phase enum when `current -> target` is legal.

    Raises `TransitionError` for an unknown kind, an unknown phase or an edge not in the
    table. The function is pure: on error nothing anywhere has changed.
    """
    enum = _phase_enum(kind)
    src = _coerce(kind, enum, current)
    dst = _coerce(kind, enum, target)
    if src == dst or dst in PHASE_TABLES[kind][src]:
        return dst
    allowed = ", ".join(sorted(str(p) for p in PHASE_TABLES[kind][src])) or "none"
    raise TransitionError(f"{kind}: illegal phase transition {src} -> {dst} (allowed: {allowed})")


def _phase_enum(kind: str) -> type[StrEnum]:
    try:
        return PHASE_ENUMS[kind]
    except KeyError:
        raise TransitionError(f"unknown kind {kind!r}: no phase table") from None


def _coerce(kind: str, enum: type[StrEnum], phase: str) -> StrEnum:
    try:
        return enum(phase)
    except ValueError:
        names = ", ".join(p.value for p in enum)
        raise TransitionError(f"{kind}: unknown phase {phase!r} (phases: {names})") from None
