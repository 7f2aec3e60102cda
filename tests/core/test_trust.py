"""Fingerprints, SPIFFE identities and Local/peer classification."""

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from grid.core.trust import (
    PeerClass,
    TrustPolicy,
    contains_private_key,
    declared_trust,
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


def _self_signed(uris: list[str], *, ca: bool) -> bytes:
    """A self-signed certificate with the given URI SANs (trust ignores the chain)."""
    import datetime as dt

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "odd")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(u) for u in uris]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(Encoding.DER)


def _spiffe_policy(ca: DevCA) -> TrustPolicy:
    return TrustPolicy.spiffe(_der(ca.issue_site("east").cert_pem), "example.org")


def test_spiffe_local_is_the_own_leafs_spiffe_id(ca: DevCA) -> None:
    own = ca.issue_site("east")
    policy = TrustPolicy.spiffe(_der(own.cert_pem), "example.org")
    assert policy.local_spiffe_id == "spiffe://example.org/site/east"
    # Another certificate with the same SPIFFE ID (a rotated SVID) is still Local.
    assert policy.classify(_der(ca.issue_site("east").cert_pem)) is PeerClass.LOCAL


def test_spiffe_refuses_a_second_uri_san(ca: DevCA) -> None:
    der = _self_signed(["spiffe://example.org/site/west", "https://west.example"], ca=False)
    assert _spiffe_policy(ca).classify(der) is PeerClass.UNKNOWN


def test_spiffe_refuses_a_ca_certificate(ca: DevCA) -> None:
    policy = _spiffe_policy(ca)
    assert policy.classify(_self_signed(["spiffe://example.org/ca"], ca=True)) is PeerClass.UNKNOWN
    assert policy.classify(_self_signed(["spiffe://example.org/w"], ca=False)) is PeerClass.PEER


def test_leaf_without_a_client_identity_is_unknown(ca: DevCA) -> None:
    no_uri = _der(ca.issue("agent-7").cert_pem)
    assert _spiffe_policy(ca).classify(no_uri) is PeerClass.UNKNOWN
    assert _spiffe_policy(ca).classify(b"not a certificate") is PeerClass.UNKNOWN


def test_pin_trust_is_declared_by_the_other_sites_fingerprints(ca: DevCA) -> None:
    east, west, north = (ca.issue_site(s) for s in ("east", "west", "north"))
    fps = {"east": east.fingerprint, "west": west.fingerprint, "north": None}
    policy = declared_trust("pin", None, _der(east.cert_pem), "east", fps)
    assert policy.classify(_der(east.cert_pem)) is PeerClass.LOCAL
    assert policy.classify(_der(west.cert_pem)) is PeerClass.PEER
    assert policy.classify(_der(north.cert_pem)) is PeerClass.UNKNOWN


def test_declared_trust_changes_exactly_when_authorized_peers_change(ca: DevCA) -> None:
    east, west, north = (ca.issue_site(s) for s in ("east", "west", "north"))
    own = _der(east.cert_pem)
    base = declared_trust("pin", None, own, "east", {"west": west.fingerprint})
    same = declared_trust("pin", None, own, "east", {"west": west.fingerprint.upper()})
    added = declared_trust(
        "pin", None, own, "east", {"west": west.fingerprint, "north": north.fingerprint}
    )
    assert base == same
    assert base != added
    assert base != declared_trust("spiffe", "example.org", own, "east", {})


def test_a_rotated_svid_with_the_same_id_is_the_same_trust(ca: DevCA) -> None:
    before = TrustPolicy.spiffe(_der(ca.issue_site("east").cert_pem), "example.org")
    after = TrustPolicy.spiffe(_der(ca.issue_site("east").cert_pem), "example.org")
    assert before == after
