"""Origin authentication of broadcast items: signing input, signatures, certificate trust.

Anyone holding the SWIM key can seal a datagram, so the frame alone cannot say
who wrote an item. Each site therefore signs its own items with the private key
of its mTLS certificate (SPEC-DECISIONS §3), and receivers check the signature
against that origin's certificate, which arrives on the origin's ``cert`` lane:

- `signing_input` is the one byte string a signature covers: a domain tag, then
  the lane, origin, revision and payload, each length-prefixed (docs/wire.md);
- `ItemSigner` signs with an ECDSA P-256 key (ECDSA with SHA-256, DER) or an
  Ed25519 key; `signature_valid` checks one signature against a public key;
- `OriginTrust` decides whether a certificate chain may speak for an origin:
  it must chain to the grid CA, be valid now, and name the origin (a GridSite
  pin under trust mode ``pin``, the last SPIFFE path segment under ``spiffe``);
- `PendingItems` holds, bounded, items that arrived before their origin's
  certificate was verified.

All of it is pure computation on bytes handed in: loading keys from files and
reading the clock are the caller's business.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import Encoding

from grid.core.swim.messages import BroadcastItem, Lane
from grid.core.trust import fingerprint_der, spiffe_ids
from grid.errors import ProtocolError

SIGNING_TAG = b"grid.swim.v1.item-signature\x00"
"""Domain separation: these bytes start every signing input, so a signature made
for a broadcast item can never be taken for a signature over anything else."""

REJECT_REASONS = (
    "payload_malformed",
    "payload_too_large",
    "payload_invalid",
    "payload_limit",
    "foreign_writer",
    "unknown_lane",
    "bad_item",
    "private_key_in_cert",
    "unsigned",
    "bad_signature",
    "cert_untrusted",
    "cert_wrong_origin",
    "pending_overflow",
)
"""The closed label set of dropped received items (``grid_swim_items_dropped_total``)."""

PrivateSigningKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
PublicVerifyingKey = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


class OriginRefused(ProtocolError):
    """An item or certificate failed origin authentication; ``code`` is a reject reason."""

    code = "bad_signature"


def _field(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def signing_input(lane: Lane | str, origin: str, revision: int, payload: bytes) -> bytes:
    """The bytes an item's signature covers.

    ``SIGNING_TAG`` ‖ u32 len ‖ lane (UTF-8 wire name, e.g. ``state``) ‖ u32 len ‖
    origin (UTF-8) ‖ u64 revision ‖ u32 len ‖ payload; integers big-endian. Every
    variable part is length-prefixed, so no two items share a signing input.
    """
    if not 0 <= revision < 2**64:
        raise ValueError("revision must fit in uint64")
    return b"".join(
        (
            SIGNING_TAG,
            _field(str(Lane(lane)).encode()),
            _field(origin.encode()),
            revision.to_bytes(8, "big"),
            _field(payload),
        )
    )


def item_signing_input(item: BroadcastItem) -> bytes:
    """`signing_input` of one broadcast item."""
    return signing_input(item.lane, item.origin, item.revision, item.payload)


def _check_key_type(key: PrivateSigningKey | PublicVerifyingKey) -> None:
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return
    ec_key = isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey)
    if ec_key and isinstance(key.curve, ec.SECP256R1):
        return
    raise OriginRefused("only ECDSA P-256 and Ed25519 site keys sign items", code="cert_untrusted")


class ItemSigner:
    """Signs this site's items with its site key (ECDSA P-256/SHA-256 or Ed25519)."""

    def __init__(self, key: PrivateSigningKey) -> None:
        _check_key_type(key)
        self._key = key

    def __repr__(self) -> str:
        return f"ItemSigner({type(self._key).__name__})"

    @property
    def public_key(self) -> PublicVerifyingKey:
        """The public half, for checking our own items."""
        return self._key.public_key()

    def sign(self, data: bytes) -> bytes:
        """Sign ``data``: a DER ECDSA signature, or a 64-byte Ed25519 one."""
        if isinstance(self._key, ed25519.Ed25519PrivateKey):
            return self._key.sign(data)
        return self._key.sign(data, ec.ECDSA(hashes.SHA256()))

    def sign_item(self, item: BroadcastItem) -> BroadcastItem:
        """The same item with its signature filled in."""
        return BroadcastItem(
            item.lane, item.origin, item.revision, item.payload, self.sign(item_signing_input(item))
        )


def signature_valid(key: PublicVerifyingKey, data: bytes, signature: bytes) -> bool:
    """True when ``signature`` over ``data`` verifies under ``key``."""
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, data)
        else:
            key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        return False
    return True


def item_signature_valid(key: PublicVerifyingKey, item: BroadcastItem) -> bool:
    """True when the item carries a signature that verifies under ``key``."""
    return bool(item.signature) and signature_valid(key, item_signing_input(item), item.signature)


@dataclass(frozen=True, slots=True)
class VerifiedOrigin:
    """An origin's certificate that passed `OriginTrust.check`."""

    fingerprint: str
    public_key: PublicVerifyingKey
    not_after: float
    """The leaf's (or chain's) expiry, Unix seconds: items are checked against it."""


def _unix(moment: dt.datetime) -> float:
    return moment.timestamp()


@dataclass(frozen=True)
class OriginTrust:
    """Which certificate chains may speak for which origin.

    ``roots`` are the grid CA certificates. Under ``pin``, ``pins`` maps a site
    name to the fingerprints its GridSite accepts (leaf DER SHA-256); under
    ``spiffe`` the leaf's single SPIFFE ID must be in ``trust_domain`` and its
    last path segment must be the origin's name.
    """

    roots: tuple[x509.Certificate, ...] = ()
    mode: Literal["pin", "spiffe"] = "pin"
    pins: Mapping[str, frozenset[str]] = field(default_factory=dict)
    trust_domain: str | None = None
    chain_certs_max: int = 4
    """Certificates accepted in one cert-lane chain (leaf plus intermediates). A
    real chain is one to three deep; the bound caps signature checks per item."""

    @classmethod
    def from_pem(
        cls,
        ca_pem: bytes,
        mode: Literal["pin", "spiffe"] = "pin",
        pins: Mapping[str, Iterable[str]] | None = None,
        trust_domain: str | None = None,
    ) -> OriginTrust:
        """Trust built from the grid CA PEM bundle and the declared pins."""
        roots = tuple(x509.load_pem_x509_certificates(ca_pem)) if ca_pem else ()
        held = {site: frozenset(fps) for site, fps in (pins or {}).items()}
        return cls(roots=roots, mode=mode, pins=held, trust_domain=trust_domain)

    def check(
        self, origin: str, chain_pem: str, now: float, *, named: bool = True
    ) -> VerifiedOrigin:
        """Verify a cert-lane chain for ``origin`` at Unix time ``now``; raises `OriginRefused`.

        With ``named=False`` the chain must still reach the grid CA, but need not
        be named by a pin or SPIFFE ID: an *introduction*, which lets a site be
        shown and discovered, never believed (`GridState.introduced`).
        """
        try:
            chain = x509.load_pem_x509_certificates(chain_pem.encode("ascii"))
        except (ValueError, UnicodeEncodeError) as exc:
            raise OriginRefused("cert lane holds no certificate", code="cert_untrusted") from exc
        if not chain or len(chain) > self.chain_certs_max:
            raise OriginRefused("cert lane chain is empty or too long", code="cert_untrusted")
        not_after = self._chain_valid(chain, now)
        leaf = chain[0]
        fingerprint = fingerprint_der(leaf.public_bytes(Encoding.DER))
        if named and not self._names(origin, leaf, fingerprint):
            raise OriginRefused("certificate does not name the origin", code="cert_wrong_origin")
        key = leaf.public_key()
        if not isinstance(key, ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey):
            raise OriginRefused("unsupported site key type", code="cert_untrusted")
        _check_key_type(key)
        return VerifiedOrigin(fingerprint, key, not_after)

    def _names(self, origin: str, leaf: x509.Certificate, fingerprint: str) -> bool:
        if self.mode == "pin":
            return fingerprint in self.pins.get(origin, frozenset())
        ids = spiffe_ids(leaf)
        if len(ids) != 1 or not self.trust_domain:
            return False
        prefix = f"spiffe://{self.trust_domain}/"
        path = ids[0][len(prefix) :] if ids[0].startswith(prefix) else ""
        return bool(path) and path.rsplit("/", 1)[-1] == origin

    def _chain_valid(self, chain: list[x509.Certificate], now: float) -> float:
        """Walk leaf → intermediates → a root; every link signed and in its validity."""
        not_after = min(_unix(c.not_valid_after_utc) for c in chain)
        for cert in chain:
            if not _unix(cert.not_valid_before_utc) <= now <= _unix(cert.not_valid_after_utc):
                raise OriginRefused("certificate outside its validity", code="cert_untrusted")
        current = chain[0]
        for _ in range(len(chain)):
            root = next((r for r in self.roots if _issued_by(current, r)), None)
            if root is not None:
                if not _unix(root.not_valid_before_utc) <= now <= _unix(root.not_valid_after_utc):
                    raise OriginRefused("grid CA outside its validity", code="cert_untrusted")
                return min(not_after, _unix(root.not_valid_after_utc))
            parents = (c for c in chain[1:] if c is not current and _issued_by(current, c))
            parent = next(parents, None)
            if parent is None or not _is_ca(parent):
                break
            current = parent
        raise OriginRefused("certificate does not chain to the grid CA", code="cert_untrusted")


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    if not _is_ca(issuer):
        return False
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


@dataclass(frozen=True, slots=True)
class AuthLimits:
    """Bounds of origin authentication."""

    pending_items_max: int = 1024
    """Items held while their origin's certificate is not verified yet, over all
    origins (one per origin and lane, newest revision kept). Beyond it an item is
    dropped (``pending_overflow``) and anti-entropy brings it again later; more
    room means less waiting after a start, and more memory a peer can claim."""


class PendingItems:
    """Items waiting for their origin's certificate: one per (origin, lane), bounded."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: dict[tuple[str, Lane], BroadcastItem] = {}

    def __len__(self) -> int:
        return len(self._items)

    def hold(self, item: BroadcastItem) -> bool:
        """Keep ``item`` (replacing an older one of its origin and lane); False when full."""
        key = (item.origin, Lane(item.lane))
        known = self._items.get(key)
        if known is not None:
            if item.revision > known.revision:
                self._items[key] = item
            return True
        if len(self._items) >= self.limit:
            return False
        self._items[key] = item
        return True

    def peek(self, origin: str, lane: Lane) -> BroadcastItem | None:
        """The item waiting for ``origin`` on ``lane``, left in place."""
        return self._items.get((origin, lane))

    def release(self, origin: str) -> list[BroadcastItem]:
        """Take every item waiting for ``origin``, in lane order."""
        taken = [self._items.pop((origin, lane)) for lane in Lane if (origin, lane) in self._items]
        return taken


@dataclass(frozen=True)
class OriginAuth:
    """What a replica needs to sign its own items and authenticate everyone else's.

    ``clock`` returns Unix seconds (certificate validity is judged against it);
    ``signer`` is absent on a site without a key, whose items peers then drop.
    """

    trust: OriginTrust
    clock: Callable[[], float]
    signer: ItemSigner | None = None
    limits: AuthLimits = field(default_factory=AuthLimits)
