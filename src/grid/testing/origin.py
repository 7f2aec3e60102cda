"""Origin authentication for tests and the simulator: one dev CA, a key per site.

`SitePki.create(["east", "west"])` issues each site a certificate from a fresh
development CA (`grid.demo.pki.DevCA`) and builds what a replica needs from
it: the site's `OriginAuth` (its signer, and trust in the CA with every site's
pin or SPIFFE ID) and its cert-lane value. It is the same material the
operator loads from ``--ca``, ``--cert`` and ``--key``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from grid.core.crdt.origin import AuthLimits, ItemSigner, OriginAuth, OriginTrust
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import CertLaneValue, Lane
from grid.core.trust import public_chain_pem
from grid.demo.pki import DevCA, Issued, KeyKind


@dataclass
class SitePki:
    """A dev CA and one issued certificate per site."""

    ca: DevCA
    issued: dict[str, Issued]
    mode: Literal["pin", "spiffe"] = "pin"
    clock: Callable[[], float] = time.time

    @classmethod
    def create(
        cls,
        sites: Iterable[str],
        *,
        mode: Literal["pin", "spiffe"] = "pin",
        key_kind: KeyKind = "ec-p256",
        seed: int | None = None,
    ) -> SitePki:
        """A fresh CA issuing every site a certificate with a ``key_kind`` key.

        With ``seed`` the keys derive from it and the CA's key is of the same
        kind, so with Ed25519 (deterministic signatures) every certificate and
        signature has the same size on every run: what a seeded simulation
        needs to replay exactly.
        """
        ca = DevCA() if seed is None else DevCA(rng=random.Random(seed), key_kind=key_kind)
        return cls(ca, {site: ca.issue_site(site, key_kind) for site in sites}, mode)

    def trust(self) -> OriginTrust:
        """Trust in this CA, with every site's fingerprint pinned (or SPIFFE IDs)."""
        pins = {site: [issued.fingerprint] for site, issued in self.issued.items()}
        domain = self.ca.trust_domain if self.mode == "spiffe" else None
        return OriginTrust.from_pem(self.ca.cert_pem, self.mode, pins, domain)

    def signer(self, site: str) -> ItemSigner:
        """The site's item signer, from its private key."""
        key = load_pem_private_key(self.issued[site].key_pem, None)
        assert isinstance(key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey)
        return ItemSigner(key)

    def auth(self, site: str, limits: AuthLimits | None = None) -> OriginAuth:
        """What ``site``'s replica needs: its signer and trust in the grid CA."""
        return OriginAuth(self.trust(), self.clock, self.signer(site), limits or AuthLimits())

    def cert_lane(self, site: str) -> CertLaneValue:
        """The site's cert-lane value: its public chain."""
        return CertLaneValue(public_chain_pem(self.issued[site].cert_pem))

    def replica(self, site: str, base_revision: int = 0) -> GridState:
        """A replica for ``site`` that signs and verifies, its cert lane already written."""
        replica = GridState(site, base_revision, auth=self.auth(site))
        replica.update_local(replica.local.set_lane(Lane.CERT, self.cert_lane(site)))
        return replica
