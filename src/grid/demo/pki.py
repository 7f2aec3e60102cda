"""A development PKI: one CA, site and agent certificates, and a SWIM key.

This is what `grid certs init` and `grid demo` use, and what tests use to run
real mTLS handshakes. Certificates are ECDSA P-256, the CA signs every leaf, and
each leaf carries a SPIFFE URI SAN (``spiffe://{trust_domain}/site/{name}``) plus
DNS ``localhost`` and IP ``127.0.0.1`` so loopback servers verify. It is for
development and tests only; production sites bring their own issuer.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from grid.core.trust import fingerprint_der

DEFAULT_TRUST_DOMAIN = "grid.local"
SWIM_KEY_BYTES = 32
VALIDITY = dt.timedelta(days=30)


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, both PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the leaf DER as 64 lowercase hex digits (GridSite trust pin)."""
        cert = x509.load_pem_x509_certificate(self.cert_pem)
        return fingerprint_der(cert.public_bytes(serialization.Encoding.DER))


KeyKind = Literal["ec-p256", "ed25519"]
SigningKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def _new_key(kind: KeyKind, rng: random.Random | None) -> SigningKey:
    """A fresh key from the OS RNG, or derived from ``rng`` (reproducible, tests only)."""
    if kind == "ed25519":
        if rng is None:
            return ed25519.Ed25519PrivateKey.generate()
        return ed25519.Ed25519PrivateKey.from_private_bytes(rng.randbytes(32))
    if rng is None:
        return ec.generate_private_key(ec.SECP256R1())
    return ec.derive_private_key(rng.randrange(1, _P256_ORDER), ec.SECP256R1())


def _digest(key: SigningKey) -> hashes.SHA256 | None:
    return None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


class DevCA:
    """A self-signed development CA that issues leaf certificates.

    With ``rng`` every key and serial number derives from it, so a seeded test
    (the simulator) gets the same certificate sizes on every run; without it
    they come from the OS RNG. ``key_kind`` is the CA's own key.
    """

    def __init__(
        self,
        name: str = "grid dev CA",
        trust_domain: str = DEFAULT_TRUST_DOMAIN,
        *,
        rng: random.Random | None = None,
        key_kind: KeyKind = "ec-p256",
    ):
        self.trust_domain = trust_domain
        self._rng = rng
        self._key = _new_key(key_kind, rng)
        now = dt.datetime.now(dt.UTC)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(self._serial())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, _digest(self._key))
        )

    def _serial(self) -> int:
        # 63 bits with the top one set: always 8 DER bytes, so sizes repeat.
        return (
            x509.random_serial_number()
            if self._rng is None
            else self._rng.getrandbits(62) | 1 << 62
        )

    @classmethod
    def load(
        cls, cert_pem: bytes, key_pem: bytes, trust_domain: str = DEFAULT_TRUST_DOMAIN
    ) -> DevCA:
        """The CA whose certificate and private key `write_dev_pki` wrote, to issue more."""
        ca = cls.__new__(cls)
        ca.trust_domain = trust_domain
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
            raise ValueError("the dev CA key must be an EC P-256 or Ed25519 key")
        ca._key = key
        ca._rng = None
        ca._cert = x509.load_pem_x509_certificate(cert_pem)
        return ca

    @property
    def key_pem(self) -> bytes:
        """The CA's private key, PEM-encoded (a dev CA: kept next to it, mode 0600)."""
        return self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def cert_pem(self) -> bytes:
        """The CA certificate, PEM-encoded."""
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        *,
        spiffe_path: str | None = None,
        dns_names: tuple[str, ...] = ("localhost",),
        ip_addresses: tuple[str, ...] = ("127.0.0.1",),
        key_kind: KeyKind = "ec-p256",
    ) -> Issued:
        """Issue a leaf usable as both TLS server and client certificate.

        ``spiffe_path`` (for example ``site/east``) adds the URI SAN
        ``spiffe://{trust_domain}/{spiffe_path}``; without it the leaf carries
        only its CN as identity. ``key_kind`` picks the leaf's key: ECDSA P-256
        (the default, what TLS stacks everywhere accept) or Ed25519.
        """
        key = _new_key(key_kind, self._rng)
        now = dt.datetime.now(dt.UTC)
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if spiffe_path is not None:
            sans.append(
                x509.UniformResourceIdentifier(f"spiffe://{self.trust_domain}/{spiffe_path}")
            )
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(self._serial())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, _digest(self._key))
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return Issued(cert.public_bytes(serialization.Encoding.PEM), key_pem)

    def issue_site(self, site: str, key_kind: Literal["ec-p256", "ed25519"] = "ec-p256") -> Issued:
        """A site certificate with SPIFFE ID ``spiffe://{trust_domain}/site/{site}``."""
        return self.issue(site, spiffe_path=f"site/{site}", key_kind=key_kind)


def new_swim_key() -> bytes:
    """32 random bytes from the OS RNG: an AES-256-GCM SWIM key."""
    return os.urandom(SWIM_KEY_BYTES)


@dataclass(frozen=True)
class SitePaths:
    """Where `write_dev_pki` put one site's certificate and key."""

    cert: Path
    key: Path
    fingerprint: str


@dataclass(frozen=True)
class DevPki:
    """The files written by `write_dev_pki`."""

    ca: Path
    swim_key: Path
    sites: dict[str, SitePaths]


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def write_dev_pki(
    directory: Path, sites: list[str], trust_domain: str = DEFAULT_TRUST_DOMAIN
) -> DevPki:
    """Write ``ca.pem``, ``swim.key`` and ``{site}.pem``/``{site}-key.pem`` into a directory.

    The CA's key goes to ``ca-key.pem`` so that `issue_dev_site` can add sites
    later. Private keys and the SWIM key are written with mode 0600.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = DevCA(trust_domain=trust_domain)
    (directory / "ca.pem").write_bytes(ca.cert_pem)
    _write_private(directory / "ca-key.pem", ca.key_pem)
    _write_private(directory / "swim.key", new_swim_key())
    written = {site: _write_site(directory, ca, site) for site in sites}
    return DevPki(ca=directory / "ca.pem", swim_key=directory / "swim.key", sites=written)


def _write_site(directory: Path, ca: DevCA, site: str) -> SitePaths:
    issued = ca.issue_site(site)
    cert_path, key_path = directory / f"{site}.pem", directory / f"{site}-key.pem"
    cert_path.write_bytes(issued.cert_pem)
    _write_private(key_path, issued.key_pem)
    return SitePaths(cert_path, key_path, issued.fingerprint)


def issue_dev_site(
    directory: Path, site: str, trust_domain: str = DEFAULT_TRUST_DOMAIN
) -> SitePaths:
    """Issue one more site certificate from the dev CA `write_dev_pki` left in ``directory``."""
    ca = DevCA.load(
        (directory / "ca.pem").read_bytes(), (directory / "ca-key.pem").read_bytes(), trust_domain
    )
    return _write_site(directory, ca, site)
