"""The GridSite controller: SWIM's view plus mTLS egress probes, into phases.

Each round, for every GridSite of the network, the controller gathers a
`SiteObservation` (is the member alive in SWIM, did it leave gracefully, does
the site carry the auto-discover label, is its egress known, and, once
Connecting or beyond, did an mTLS probe of ``egress.address`` present the
pinned certificate), asks `grid.core.resources.lifecycle.next_site_phase` for the next
phase, and writes status only when the phase or reason changed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import ssl
from typing import Any

from grid.adapters.store.port import ResourceStore
from grid.adapters.tls_probe import PROBE_TIMEOUT_S, probe
from grid.core.resources import GridSite
from grid.core.resources.lifecycle import Probe, SiteObservation, next_site_phase
from grid.core.resources.phases import SitePhase
from grid.core.resources.status import GridSiteStatus
from grid.core.swim.members import MemberState

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


class SiteController:
    """Moves GridSites through their phases from SWIM events and egress probes."""

    def __init__(
        self,
        store: ResourceStore,
        own_site: str,
        tls: ssl.SSLContext | None,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
    ) -> None:
        self._store = store
        self._own_site = own_site
        self._tls = tls
        self._probe_timeout_s = probe_timeout_s
        self.phases: dict[str, SitePhase] = {}
        self._probed: dict[str, tuple[str, str | None]] = {}
        """Per site, the last egress probe's time and the leaf PEM it was shown."""

    async def reconcile(self, sites: list[GridSite], members: dict[str, MemberState]) -> bool:
        """One round over every site; True when any phase changed.

        Sites are reconciled concurrently, so a round takes one probe timeout at
        most however many peers are black-holed.
        """
        changed = False
        phases = await asyncio.gather(*(self._reconcile_one(site, members) for site in sites))
        for site, phase in zip(sites, phases, strict=True):
            changed |= self.phases.get(site.name) is not phase
            self.phases[site.name] = phase
        for gone in set(self.phases) - {s.name for s in sites}:
            del self.phases[gone]
        return changed

    async def _probe(self, site: GridSite) -> Probe:
        egress = site.spec.egress
        if self._tls is None or egress is None or not egress.address:
            return Probe.NOT_RUN
        server_name = egress.tls.server_name if egress.tls else None
        result = await probe(egress.address, self._tls, server_name, self._probe_timeout_s)
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        self._probed[site.name] = (now, result.pem)
        if not result.reachable:
            return Probe.UNREACHABLE
        # A site matches any of its pins (certFingerprint and canonicalFingerprints).
        accepted = site.spec.accepted_fingerprints
        return Probe.PASSED if result.fingerprint in accepted else Probe.FINGERPRINT_MISMATCH

    async def _reconcile_one(self, site: GridSite, members: dict[str, MemberState]) -> SitePhase:
        current = self.phases.get(site.name, site.phase)
        state = MemberState.ALIVE if site.name == self._own_site else members.get(site.name)
        egress = site.spec.egress
        result = Probe.NOT_RUN
        if current in (SitePhase.CONNECTING, SitePhase.ACTIVE, SitePhase.UNREACHABLE):
            result = await self._probe(site)
        seen = SiteObservation(
            auto_discover=site.auto_discover,
            swim_alive=state is MemberState.ALIVE or state is MemberState.SUSPECT,
            swim_left=state is MemberState.LEFT,
            egress_known=egress is not None and bool(egress.address),
            probe=result,
        )
        phase = next_site_phase(current, seen)
        reason = _REASONS.get(phase, "Pending")
        if result is Probe.FINGERPRINT_MISMATCH:
            reason = "FingerprintMismatch"
        status = site.status
        probed = self._probed.pop(site.name, None) if result is not Probe.NOT_RUN else None
        moved = status is None or status.phase is not phase or status.reason != reason
        patch = _probe_fields(status, probed, moved)
        if moved:
            patch.update(
                phase=phase.value, reason=reason, observedGeneration=site.metadata.generation
            )
            if phase is not current or status is None:
                log.info(
                    "site phase",
                    extra={"site": site.name, "from": current.value, "to": phase.value},
                )
        if patch:
            await self._store.patch_status("GridSite", site.name, patch)
        return phase


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
