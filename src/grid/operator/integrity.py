"""The operator's side of origin authentication: keys from files, trust from resources.

The replica (`grid.core.crdt.replica.GridState`) signs our items and checks
everyone else's (`grid.core.crdt.origin`). What it needs comes from here:

- the signer, from the site private key file (``--key``), the key of the
  site's mTLS certificate;
- the trust: the grid CA (``--ca``), the GridNetwork's ``spec.tls.trust`` mode
  and domain, and under ``pin`` every GridSite's pins (``trust.certFingerprint`` and
  ``trust.canonicalFingerprints``);
- the exported counters: dropped items per closed reason, and items waiting
  for their origin's certificate.

Without ``--ca`` nothing verifies and without ``--key`` nothing is signed, so
such a site neither takes remote state nor is believed by its peers (fail
closed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from grid.core.crdt.origin import AuthLimits, ItemSigner, OriginAuth, OriginRefused, OriginTrust
from grid.core.crdt.replica import GridState
from grid.core.resources import GridNetwork, GridSite
from grid.core.resources.discovery import member_of
from grid.errors import GridError

log = logging.getLogger(__name__)


class KeyRefused(GridError):
    """The site key or grid CA file is unusable; the message says why (never its content)."""

    code = "site_key_refused"


def load_signer(path: Path | None) -> ItemSigner | None:
    """The item signer from the site key file, or None without one."""
    if path is None:
        return None
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise KeyRefused("the site key file is unreadable or not an unencrypted PEM key") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
        raise KeyRefused("the site key must be ECDSA P-256 or Ed25519 to sign state items")
    try:
        return ItemSigner(key)
    except OriginRefused as exc:
        raise KeyRefused("the site key must be ECDSA P-256 or Ed25519 to sign state items") from exc


def read_ca(path: Path | None) -> bytes:
    """The grid CA PEM bundle, or nothing without ``--ca``; refuses a file with no certificate."""
    if path is None:
        return b""
    try:
        pem = path.read_bytes()
        x509.load_pem_x509_certificates(pem)
    except (OSError, ValueError) as exc:
        raise KeyRefused("the grid CA file is unreadable or holds no PEM certificate") from exc
    return pem


def trust_for(ca_pem: bytes, network: GridNetwork | None, sites: Iterable[GridSite]) -> OriginTrust:
    """Trust from the CA, the network's trust mode and the GridSites' pins."""
    config = network.spec.tls.trust if network is not None and network.spec.tls else None
    pins: dict[str, list[str]] = {}
    for site in sites:
        if site.spec.trust is not None:
            # Any of the site's pins (certFingerprint and canonicalFingerprints, §2a),
            # keyed by the member the site stands for (an auto-discovered one's differs).
            pins.setdefault(member_of(site), []).extend(site.spec.accepted_fingerprints)
    if config is not None and config.mode == "spiffe":
        return OriginTrust.from_pem(ca_pem, "spiffe", pins, config.trust_domain)
    return OriginTrust.from_pem(ca_pem, "pin", pins)


def origin_auth(ca: Path | None, key: Path | None, limits: AuthLimits | None = None) -> OriginAuth:
    """The replica's authentication before any resource is read (pins come later)."""
    trust = trust_for(read_ca(ca), None, ())
    return OriginAuth(trust, time.time, load_signer(key), limits or AuthLimits())


class ItemCounters(Collector):
    """Exports the replica's dropped-item counters and its pending queue."""

    def __init__(self, replica: GridState, registry: CollectorRegistry) -> None:
        self._replica = replica
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        """One sample per closed reason, and the pending gauge."""
        dropped = CounterMetricFamily(
            "grid_swim_items_dropped",
            "Received broadcast items dropped by the replica, by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(self._replica.counters.dropped.items()):
            dropped.add_metric([reason], count)
        yield dropped
        yield GaugeMetricFamily(
            "grid_swim_items_pending",
            "Received items waiting for their origin's certificate to be verified.",
            value=self._replica.pending,
        )
