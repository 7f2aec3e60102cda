"""Fixtures of the adapter tests: certificates for real mTLS handshakes on loopback."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from grid.demo.pki import DevCA


@dataclass(frozen=True)
class Leaf:
    """One certificate and key on disk, with its DER."""

    cert: Path
    key: Path
    der: bytes


@dataclass(frozen=True)
class SignalsPki:
    """A grid CA with east (the server's own site), west (a peer), rogue (an untrusted
    site of the same CA), and a leaf from a foreign CA."""

    ca: Path
    leaves: dict[str, Leaf]


def _write(root: Path, name: str, cert_pem: bytes, key_pem: bytes) -> Leaf:
    cert, key = root / f"{name}.pem", root / f"{name}-key.pem"
    cert.write_bytes(cert_pem)
    key.write_bytes(key_pem)
    der = x509.load_pem_x509_certificate(cert_pem).public_bytes(Encoding.DER)
    return Leaf(cert, key, der)


@pytest.fixture(scope="session")
def signals_pki(tmp_path_factory: pytest.TempPathFactory) -> SignalsPki:
    """Certificates made once per session."""
    root = tmp_path_factory.mktemp("signals-pki")
    ca = DevCA(trust_domain="grid.test")
    (root / "ca.pem").write_bytes(ca.cert_pem)
    leaves = {}
    for name in ("east", "west", "rogue"):
        issued = ca.issue_site(name)
        leaves[name] = _write(root, name, issued.cert_pem, issued.key_pem)
    foreign = DevCA(trust_domain="grid.test").issue_site("west")
    leaves["foreign"] = _write(root, "foreign", foreign.cert_pem, foreign.key_pem)
    return SignalsPki(root / "ca.pem", leaves)
