"""Peer trust: certificate fingerprints, SPIFFE IDs and Local/peer classification.

SPEC-DECISIONS §2 fixes two trust modes. Under ``pin`` a peer is authorized when
the SHA-256 of its leaf certificate's DER equals a GridSite's
``trust.certFingerprint``. Under ``spiffe`` a peer is authorized when its single
URI SAN is ``spiffe://{trustDomain}/...``. "Local" means the caller presents the
site's own certificate. Parsing certificates is pure computation, so it lives in
the core; loading them from disk and doing handshakes does not.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

from grid.errors import ValidationError

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
PRIVATE_KEY_MARKER = "PRIVATE KEY"


class PeerClass(enum.Enum):
    """How a verified TLS client relates to this site."""

    LOCAL = "local"
    PEER = "peer"
    UNKNOWN = "unknown"


def normalize_fingerprint(value: str) -> str:
    """Return a fingerprint as 64 lowercase hex digits, accepting optional colons.

    Raises `ValidationError` when the value is not a SHA-256 fingerprint.
    """
    cleaned = value.replace(":", "").strip().lower()
    if not _HEX64.match(cleaned):
        raise ValidationError(
            "certFingerprint must be 64 hex characters (SHA-256), optionally colon-separated",
            path="spec.trust.certFingerprint",
        )
    return cleaned


def fingerprint_der(der: bytes) -> str:
    """SHA-256 of a certificate's DER encoding, as 64 lowercase hex digits."""
    return hashlib.sha256(der).hexdigest()


def fingerprint_pem(pem: bytes) -> str:
    """SHA-256 fingerprint of the first certificate in a PEM document."""
    cert = x509.load_pem_x509_certificate(pem)
    return fingerprint_der(cert.public_bytes(Encoding.DER))


def spiffe_ids(cert: x509.Certificate) -> list[str]:
    """Every ``spiffe://`` URI SAN of a certificate, in order."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    uris = san.value.get_values_for_type(x509.UniformResourceIdentifier)
    return [u for u in uris if u.startswith("spiffe://")]


def common_name(cert: x509.Certificate) -> str | None:
    """The subject CN of a certificate, if it has exactly one."""
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1:
        return None
    value = names[0].value
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def workload_identity(cert: x509.Certificate) -> str | None:
    """The identity a certificate asserts: its single SPIFFE URI SAN, else its CN."""
    ids = spiffe_ids(cert)
    if len(ids) == 1:
        return ids[0]
    if len(ids) > 1:
        return None
    return common_name(cert)


def spiffe_in_domain(spiffe_id: str, trust_domain: str) -> bool:
    """True when a SPIFFE ID belongs to ``trust_domain`` and names a workload path."""
    prefix = f"spiffe://{trust_domain}/"
    return spiffe_id.startswith(prefix) and len(spiffe_id) > len(prefix)


def uri_sans(cert: x509.Certificate) -> list[str]:
    """Every URI SAN of a certificate, SPIFFE or not, in order."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return list(san.value.get_values_for_type(x509.UniformResourceIdentifier))


def is_ca(cert: x509.Certificate) -> bool:
    """True when the certificate's basic constraints mark it as a CA."""
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    except x509.ExtensionNotFound:
        return False
    return bool(constraints.value.ca)


def svid_id(cert: x509.Certificate, trust_domain: str) -> str | None:
    """The SPIFFE ID of an X.509-SVID in ``trust_domain``, or None when it is not one.

    An SVID has exactly one URI SAN, ``spiffe://{trustDomain}/...``, and is not a
    CA: a certificate with a second URI SAN, or a signing certificate, asserts
    no workload identity and is refused (SPEC-DECISIONS §2).
    """
    uris = uri_sans(cert)
    if len(uris) != 1 or not spiffe_in_domain(uris[0], trust_domain) or is_ca(cert):
        return None
    return uris[0]


@dataclass(frozen=True)
class TrustPolicy:
    """The declared trust of one site: its own identity and its authorized peers.

    Under ``pin`` the identities are fingerprints; under ``spiffe`` the local
    identity is the site's SPIFFE ID and peers are any ID in ``trust_domain``.
    Two policies are equal exactly when they authorize the same callers, which is
    what a peer-trust change means (seed 000: a restart under poll).
    """

    mode: str
    local_fingerprint: str
    peer_fingerprints: frozenset[str] = frozenset()
    trust_domain: str | None = None
    local_spiffe_id: str | None = None

    @classmethod
    def pin(cls, local_fingerprint: str, peers: Iterable[str]) -> TrustPolicy:
        """A pin-mode policy from fingerprints (colons allowed)."""
        return cls(
            mode="pin",
            local_fingerprint=normalize_fingerprint(local_fingerprint),
            peer_fingerprints=frozenset(normalize_fingerprint(p) for p in peers),
        )

    @classmethod
    def spiffe(cls, own_leaf_der: bytes, trust_domain: str) -> TrustPolicy:
        """A spiffe-mode policy; Local is the SPIFFE ID of the site's own leaf.

        The leaf's fingerprint is deliberately not kept: a rotated SVID with the
        same SPIFFE ID is the same trust, not a trust change.
        """
        own = x509.load_der_x509_certificate(own_leaf_der)
        return cls(
            mode="spiffe",
            local_fingerprint="",
            trust_domain=trust_domain,
            local_spiffe_id=svid_id(own, trust_domain),
        )

    def classify(self, leaf_der: bytes) -> PeerClass:
        """Classify a verified client leaf certificate as Local, peer or unknown.

        Bytes that do not parse as a certificate are unknown, never an error,
        so a caller can pass whatever the TLS layer handed it.
        """
        fp = fingerprint_der(leaf_der)
        if self.mode == "pin":
            if fp == self.local_fingerprint:
                return PeerClass.LOCAL
            return PeerClass.PEER if fp in self.peer_fingerprints else PeerClass.UNKNOWN
        if self.trust_domain is None:
            return PeerClass.UNKNOWN
        try:
            cert = x509.load_der_x509_certificate(leaf_der)
        except ValueError:
            return PeerClass.UNKNOWN
        identity = svid_id(cert, self.trust_domain)
        if identity is None:
            return PeerClass.UNKNOWN
        if identity == self.local_spiffe_id:
            return PeerClass.LOCAL
        return PeerClass.PEER


def declared_trust(
    mode: str,
    trust_domain: str | None,
    own_leaf_der: bytes,
    own_site: str,
    site_fingerprints: Mapping[str, str | None],
) -> TrustPolicy:
    """The policy a GridNetwork's ``tls.trust`` and its GridSites declare.

    ``site_fingerprints`` maps each GridSite of the network to its
    ``trust.certFingerprint`` (None when it pins none). Under pin every other
    site's fingerprint is an authorized peer; the site's own GridSite adds
    nothing, because Local is the certificate the operator actually holds.
    """
    if mode == "spiffe":
        if trust_domain is None:
            raise ValidationError("trustDomain is required when mode is spiffe", path="trust")
        return TrustPolicy.spiffe(own_leaf_der, trust_domain)
    peers = [fp for site, fp in site_fingerprints.items() if site != own_site and fp is not None]
    return TrustPolicy.pin(fingerprint_der(own_leaf_der), peers)


def contains_private_key(pem: bytes | str) -> bool:
    """True when a PEM blob carries private-key material and must be discarded."""
    text = pem.decode("latin-1") if isinstance(pem, bytes) else pem
    return PRIVATE_KEY_MARKER in text


def public_chain_pem(pem: bytes) -> str:
    """Only the certificates of a PEM bundle, re-encoded: what may be gossiped.

    Whatever else the bundle holds (a private key appended by mistake, say) is
    dropped, so the cert lane can only ever carry public material.
    """
    certs = x509.load_pem_x509_certificates(pem)
    return "".join(c.public_bytes(Encoding.PEM).decode("ascii") for c in certs)
