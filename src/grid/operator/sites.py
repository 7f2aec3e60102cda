"""The GridSite controller: SWIM's view plus mTLS egress probes, into phases.

Each round, for every GridSite of the network, the controller gathers a
`SiteObservation` (is the member alive in SWIM, did it leave gracefully, does
the site carry the auto-discover label, is its egress known, and, once
Connecting or beyond, did an mTLS probe of ``egress.address`` present the
pinned certificate), asks `grid.core.resources.lifecycle.next_site_phase` for the next
phase, and writes status only when the phase, the reason or a shown field changed.

An egress declared ``tls.mode: Plaintext`` is probed as upstream Grid probes it, by
a TCP connect (`grid.adapters.tls_probe.tcp_probe`): reachable is reason
``IdentityVerificationRequired`` and never Active (an Active site falls to
Unreachable), unreachable is ``PlaintextUnreachable``. `SiteMetrics` exports
upstream's ``grid_gateway_probe_total{outcome,tls_mode}``,
``grid_gateway_probe_duration_seconds`` and
``grid_site_phase_transition_total{from_phase,to_phase,reason}`` (``from_phase``
``None`` for a site with no status yet).

A member counts as departed when it left gracefully (at once) or has been
declared dead for the network's ``staleCandidateTtlSeconds`` (300 s unset); the
controller measures "dead for" on its own clock from the round it first saw the
member dead. Phases are keyed by the member's site name (`member_of`), which for
an auto-discovered GridSite differs from the object's name. Before any probe
has shown the site's certificate, ``status.publicCertPem`` holds the chain its
cert lane gossips, so a person can pin a site nobody probed yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from grid.adapters.store.port import ResourceStore
from grid.adapters.tls_probe import (
    MUTUAL_OUTCOMES,
    PLAINTEXT_OUTCOMES,
    PROBE_TIMEOUT_S,
    ProbeOutcome,
    ProbeResult,
    probe,
    session_key,
    tcp_probe,
)
from grid.adapters.tls_sessions import TlsSessions
from grid.core.resources import GridSite
from grid.core.resources.discovery import discovery_enabled, member_of
from grid.core.resources.lifecycle import Probe, SiteObservation, departed, next_site_phase
from grid.core.resources.phases import SitePhase
from grid.core.resources.site_offers import site_offer
from grid.core.resources.status import GridSiteStatus
from grid.core.swim.members import MemberState
from grid.operator.resilience import WriteFailed, WriteGuard, WriteSite

log = logging.getLogger(__name__)

PROBE_TIME_REFRESH_S = 60.0
"""How stale ``status.lastProbeTime`` may get before a probe writes it on its own. Every
probe refreshes it when something else is written; between changes one write a
minute keeps it telling while a steady mesh stays almost write-free."""

_REASONS = {
    SitePhase.DISCOVERED: "SwimMemberAlive",
    SitePhase.CONNECTING: "EgressKnown",
    SitePhase.ACTIVE: "FingerprintVerified",
    SitePhase.UNREACHABLE: "ProbeFailed",
    SitePhase.LEFT: "LeftMesh",
}


PLAINTEXT_REASONS = {
    Probe.IDENTITY_UNVERIFIED: "IdentityVerificationRequired",
    Probe.UNREACHABLE: "PlaintextUnreachable",
}
"""Upstream's reasons for a plaintext egress probe: reachable, or not."""


class SiteMetrics:
    """Upstream Grid's probe and phase-transition metrics, under its names and labels."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.probes = Counter(
            "grid_gateway_probe",
            "Gateway egress probe attempts, by outcome and egress TLS mode.",
            ["outcome", "tls_mode"],
            registry=registry,
        )
        for outcome in MUTUAL_OUTCOMES:
            self.probes.labels(outcome.value, "Mutual")
        for plain in PLAINTEXT_OUTCOMES:
            self.probes.labels(plain.value, "Plaintext")
        self.probe_seconds = Histogram(
            "grid_gateway_probe_duration_seconds",
            "Duration of one gateway egress probe (connect and handshake).",
            registry=registry,
        )
        self.handshakes = Counter(
            "grid_site_probe_handshakes",
            "Completed egress probe handshakes: full, or resuming an earlier probe's session.",
            ["handshake"],
            registry=registry,
        )
        for kind in ("full", "resumed"):
            self.handshakes.labels(kind)
        self.transitions = Counter(
            "grid_site_phase_transition",
            "GridSite phase or reason changes written, by the phases and the new reason.",
            ["from_phase", "to_phase", "reason"],
            registry=registry,
        )

    def probed(self, result: ProbeResult, tls_mode: str) -> None:
        """Count one probe (``tls_mode``: the GridSite's ``Mutual`` or ``Plaintext``)."""
        self.probes.labels(result.outcome.value, tls_mode).inc()
        self.probe_seconds.observe(result.duration_s)
        if result.fingerprint is not None:
            self.handshakes.labels("resumed" if result.resumed else "full").inc()


class SiteController:
    """Moves GridSites through their phases from SWIM events and egress probes."""

    def __init__(
        self,
        store: ResourceStore,
        own_site: str,
        tls: ssl.SSLContext | None,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        metrics: SiteMetrics | None = None,
        guard: WriteGuard | None = None,
    ) -> None:
        self._store = store
        self._guard = guard or WriteGuard()
        self._metrics = metrics
        self._own_site = own_site
        self._tls = tls
        self._probe_timeout_s = probe_timeout_s
        self._clock = clock
        self._dead_since: dict[str, float] = {}
        self.phases: dict[str, SitePhase] = {}
        """Each site's phase, keyed by its member's site name."""
        self._probed: dict[str, tuple[str, str | None]] = {}
        """Per site, the last egress probe's time and the leaf PEM it was shown."""
        self.sessions = TlsSessions()
        """The TLS session of each egress whose last probe passed, resumed by the next."""

    async def reconcile(
        self,
        sites: list[GridSite],
        members: dict[str, MemberState],
        *,
        left_after_s: float | None = None,
        certs: Mapping[str, str] | None = None,
        offers: Mapping[str, dict[str, Any]] | None = None,
    ) -> bool:
        """One round over every site; True when any phase changed.

        ``left_after_s`` is the network's ``staleCandidateTtlSeconds`` (None: the
        300 s default); ``certs`` each member's gossiped certificate PEM and
        ``offers`` what its records offer, both shown in the site's status.
        Sites are reconciled concurrently, so a round takes one probe timeout
        at most however many peers are black-holed.
        """
        now = self._clock()
        for member, state in members.items():
            if state is MemberState.DEAD:
                self._dead_since.setdefault(member, now)
            else:
                self._dead_since.pop(member, None)
        for gone in set(self._dead_since) - set(members):
            del self._dead_since[gone]
        changed = False
        phases = await asyncio.gather(
            *(
                self._reconcile_one(site, members, left_after_s, certs or {}, offers)
                for site in sites
            )
        )
        for site, phase in zip(sites, phases, strict=True):
            name = member_of(site)
            changed |= self.phases.get(name) is not phase
            self.phases[name] = phase
        for gone in set(self.phases) - {member_of(s) for s in sites}:
            del self.phases[gone]
        self.sessions.retain(_egress_key(s) for s in sites)
        return changed

    def _departed(self, member: str, state: MemberState | None, ttl: float | None) -> bool:
        since = self._dead_since.get(member)
        return departed(state, None if since is None else self._clock() - since, ttl)

    async def _probe(self, site: GridSite) -> Probe:
        egress = site.spec.egress
        mode = egress.tls.mode if egress is not None and egress.tls is not None else "Mutual"
        if egress is None or not egress.address:
            self._count(ProbeOutcome.ADDRESS_MISSING, mode)
            return Probe.NOT_RUN
        if mode == "Plaintext":
            result = await tcp_probe(egress.address, self._probe_timeout_s)
            self._record(site, result, mode)
            return Probe.IDENTITY_UNVERIFIED if result.reachable else Probe.UNREACHABLE
        if self._tls is None:
            self._count(ProbeOutcome.TRUST_MATERIAL_MISSING, mode)
            return Probe.NOT_RUN
        server_name = egress.tls.server_name if egress.tls else None
        # A site matches any of its pins (certFingerprint and canonicalFingerprints).
        pins = site.spec.accepted_fingerprints
        result = await probe(
            egress.address, self._tls, server_name, self._probe_timeout_s, self.sessions, pins
        )
        matched = result.fingerprint in pins
        if result.reachable and not matched:
            result = dataclasses.replace(result, outcome=ProbeOutcome.PIN_MISMATCH)
        self._record(site, result, mode)
        if not result.reachable:
            return Probe.UNREACHABLE
        return Probe.PASSED if matched else Probe.FINGERPRINT_MISMATCH

    def _record(self, site: GridSite, result: ProbeResult, mode: str) -> None:
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        self._probed[site.name] = (now, result.pem)
        self._count(result, mode)

    def _count(self, result: ProbeOutcome | ProbeResult, mode: str) -> None:
        if isinstance(result, ProbeOutcome):
            result = ProbeResult(False, outcome=result)
        if self._metrics is not None:
            self._metrics.probed(result, mode)

    async def _reconcile_one(
        self,
        site: GridSite,
        members: dict[str, MemberState],
        left_after_s: float | None,
        certs: Mapping[str, str],
        offers: Mapping[str, dict[str, Any]] | None,
    ) -> SitePhase:
        member = member_of(site)
        current = self.phases.get(member, site.phase)
        state = MemberState.ALIVE if member == self._own_site else members.get(member)
        egress = site.spec.egress
        result = Probe.NOT_RUN
        if current in (SitePhase.CONNECTING, SitePhase.ACTIVE, SitePhase.UNREACHABLE):
            result = await self._probe(site)
        seen = SiteObservation(
            auto_discover=discovery_enabled(site),
            swim_alive=state is MemberState.ALIVE or state is MemberState.SUSPECT,
            swim_left=self._departed(member, state, left_after_s),
            egress_known=egress is not None and bool(egress.address),
            probe=result,
        )
        phase = next_site_phase(current, seen)
        reason = _REASONS.get(phase, "Pending")
        if result is Probe.FINGERPRINT_MISMATCH and phase is not SitePhase.LEFT:
            reason = "FingerprintMismatch"
        plaintext = egress is not None and egress.tls is not None and egress.tls.mode == "Plaintext"
        if plaintext and result in PLAINTEXT_REASONS and phase is not SitePhase.LEFT:
            reason = PLAINTEXT_REASONS[result]
        if phase is SitePhase.LEFT:
            reason = "LeftMesh" if state is MemberState.LEFT else "MemberDead"
        status = site.status
        probed = self._probed.pop(site.name, None) if result is not Probe.NOT_RUN else None
        moved = status is None or status.phase is not phase or status.reason != reason
        patch = _probe_fields(status, probed, moved)
        patch.update(_shown_fields(status, certs.get(member), probed, offers, member))
        if moved:
            patch.update(
                phase=phase.value, reason=reason, observedGeneration=site.metadata.generation
            )
            if self._metrics is not None:
                was = status.phase.value if status is not None else "None"
                self._metrics.transitions.labels(was, phase.value, reason).inc()
            if phase is not current or status is None:
                log.info(
                    "site phase",
                    extra={"site": site.name, "from": current.value, "to": phase.value},
                )
        if patch:
            # A write given up is counted; the phase holds and the next round writes it.
            with contextlib.suppress(WriteFailed):
                await self._guard.write(
                    WriteSite.SITE_STATUS,
                    lambda: self._store.patch_status("GridSite", site.name, patch),
                )
        return phase


def _egress_key(site: GridSite) -> tuple[str, str | None] | None:
    """The key the site's egress session is kept under (None: no egress address)."""
    egress = site.spec.egress
    if egress is None or not egress.address:
        return None
    return session_key(egress.address, egress.tls.server_name if egress.tls else None)


def _offered(status: GridSiteStatus | None) -> dict[str, Any] | None:
    if status is None:
        return None
    return status.capabilities.model_dump(by_alias=True, exclude_none=True)


def _shown_fields(
    status: GridSiteStatus | None,
    lane_pem: str | None,
    probed: tuple[str, str | None] | None,
    offers: Mapping[str, dict[str, Any]] | None,
    member: str,
) -> dict[str, Any]:
    """The gossiped certificate (until a probe shows one) and the site's offer, when changed."""
    patch: dict[str, Any] = {}
    probe_pem = probed[1] if probed is not None else None
    shown = status.public_cert_pem if status is not None else None
    # The probe's leaf wins once seen; the lane's chain only fills an empty field, so
    # the two never take turns.
    if lane_pem and probe_pem is None and not shown:
        patch["publicCertPem"] = lane_pem
    offer = None if offers is None else offers.get(member, site_offer([]))
    if offer is not None and _offered(status) != offer:
        patch["capabilities"] = offer
    return patch


def _probe_fields(
    status: GridSiteStatus | None, probed: tuple[str, str | None] | None, moved: bool
) -> dict[str, Any]:
    """The probe's status fields due now: ``publicCertPem`` when it changed, and
    ``lastProbeTime`` with any other write or once it is `PROBE_TIME_REFRESH_S` old."""
    if probed is None:
        return {}
    when, pem = probed
    patch: dict[str, Any] = {}
    if pem is not None and (status is None or status.public_cert_pem != pem):
        patch["publicCertPem"] = pem
    last = status.last_probe_time if status is not None else None
    stale = last is None or (
        dt.datetime.fromisoformat(when) - dt.datetime.fromisoformat(last)
    ) >= dt.timedelta(seconds=PROBE_TIME_REFRESH_S)
    if patch or moved or stale:
        patch["lastProbeTime"] = when
    return patch
