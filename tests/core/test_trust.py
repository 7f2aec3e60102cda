"""Fingerprints, SPIFFE identities and Local/peer classification."""

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from grid.core.trust import (
    PeerClass,
    TrustPolicy,
    contains_private_key,
    fingerprint_pem,
    normalize_fingerprint,
    spiffe_in_domain,
    workload_identity,
)
from grid.demo.pki import DevCA
from grid.errors import ValidationError


@pytest.fixture(scope="module")
def ca() -> DevCA:
    return DevCA(trust_domain="example.org")


def _der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)


def test_fingerprint_accepts_colons_and_upper_case() -> None:
    raw = "ab" * 32
    colon = ":".join(["AB"] * 32)
    assert normalize_fingerprint(colon) == raw


@pytest.mark.parametrize("bad", ["", "ab" * 31, "zz" * 32, "ab" * 33])
def test_fingerprint_rejects_non_sha256(bad: str) -> None:
    with pytest.raises(ValidationError) as err:
        normalize_fingerprint(bad)
    assert err.value.path == "spec.trust.certFingerprint"


def test_pin_policy_classifies_local_peer_and_unknown(ca: DevCA) -> None:
    east, west, rogue = ca.issue_site("east"), ca.issue_site("west"), ca.issue_site("rogue")
    policy = TrustPolicy.pin(east.fingerprint, [west.fingerprint])
    assert policy.classify(_der(east.cert_pem)) is PeerClass.LOCAL
    assert policy.classify(_der(west.cert_pem)) is PeerClass.PEER
    assert policy.classify(_der(rogue.cert_pem)) is PeerClass.UNKNOWN


def test_spiffe_policy_classifies_by_trust_domain(ca: DevCA) -> None:
    east, west = ca.issue_site("east"), ca.issue_site("west")
    foreign = DevCA(trust_domain="elsewhere.org").issue_site("west")
    policy = TrustPolicy(
        mode="spiffe",
        local_fingerprint=east.fingerprint,
        trust_domain="example.org",
        local_spiffe_id="spiffe://example.org/site/east",
    )
    assert policy.classify(_der(east.cert_pem)) is PeerClass.LOCAL
    assert policy.classify(_der(west.cert_pem)) is PeerClass.PEER
    assert policy.classify(_der(foreign.cert_pem)) is PeerClass.UNKNOWN


def test_identity_prefers_spiffe_then_common_name(ca: DevCA) -> None:
    with_uri = x509.load_pem_x509_certificate(ca.issue_site("east").cert_pem)
    cn_only = x509.load_pem_x509_certificate(ca.issue("agent-7").cert_pem)
    assert workload_identity(with_uri) == "spiffe://example.org/site/east"
    assert workload_identity(cn_only) == "agent-7"


def test_spiffe_domain_match_needs_a_path() -> None:
    assert spiffe_in_domain("spiffe://example.org/site/a", "example.org")
    assert not spiffe_in_domain("spiffe://example.org/", "example.org")
    assert not spiffe_in_domain("spiffe://example.org.evil/site/a", "example.org")


def test_private_key_marker_is_detected(ca: DevCA) -> None:
    issued = ca.issue_site("east")
    assert contains_private_key(issued.key_pem)
    assert not contains_private_key(issued.cert_pem)
    assert fingerprint_pem(issued.cert_pem) == issued.fingerprint


def test_public_chain_keeps_certificates_and_drops_key_material(ca: DevCA) -> None:
    from grid.core.trust import public_chain_pem

    issued = ca.issue_site("east")
    bundle = issued.cert_pem + issued.key_pem + ca.cert_pem
    chain = public_chain_pem(bundle)
    assert not contains_private_key(chain)
    assert chain.count("BEGIN CERTIFICATE") == 2
    assert fingerprint_pem(chain.encode()) == issued.fingerprint
