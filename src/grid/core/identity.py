"""Who a request is charged to: client keys, certificate tenants, the tenant header (§15).

Everything here is pure: the gateway adapter (`grid.gateway.client_auth`) reads
the files and the TLS peer certificate and hands the bytes in.

- `KeySet` is a parsed keys file: YAML lines ``{tenant, sha256}``, the SHA-256
  of each key in hex. A presented key is hashed, its digest looked up in an
  index of the entries' digests, and a found entry compared with it in constant
  time (`hmac.compare_digest`). The lookup costs the same with one key or
  65,536, and its timing can at most tell how a digest of the guess relates to
  a stored digest, which says nothing about any key: SHA-256 cannot be run
  backwards.
- `presented_key` takes the key from ``Authorization: Bearer`` or ``x-api-key``.
- `certificate_tenant` is the tenant of an mTLS client: the last path segment of
  its SPIFFE ID, or the subject CN without one.
- `header_tenant` reads the trusted header of ``mode: none``: two copies are
  ambiguous and refused; the value is trimmed.

Tenant names compare case-insensitively (`tenant_key`): ``ACME`` is ``acme``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grid.errors import ValidationError

MODES = ("none", "apiKey", "mtls")
"""Every ``consumerConfig.clientAuth.mode`` (the CRD's spelling)."""

RENDERED_MODES = {"none": "none", "apiKey": "api_key", "mtls": "mtls"}
"""The CRD mode to the ``client_auth`` filter's ``mode`` in praxis.yaml."""

TENANT_MAX = 256
"""Longest tenant name (the budget policy's ``tenantId`` limit)."""

KEYS_MAX = 65_536
"""Entries a keys file may hold at most."""

_HEX = re.compile(r"[0-9a-f]{64}")


class KeysFileError(ValidationError):
    """A keys file is not a YAML list of ``{tenant, sha256}``; the message says where."""

    code = "malformed_keys_file"


def tenant_key(tenant: str) -> str:
    """The form tenants compare in: case-folded, so ``ACME`` and ``acme`` are one tenant."""
    return tenant.casefold()


def key_digest(key: str) -> str:
    """The hex SHA-256 of a key, as its line in the keys file holds it."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_line(tenant: str, key: str) -> str:
    """One keys-file line for ``key`` of ``tenant``: a YAML list item."""
    # A JSON string is a YAML double-quoted scalar: any tenant name reads back as itself.
    return f'- {{tenant: {json.dumps(tenant)}, sha256: "{key_digest(key)}"}}\n'


@dataclass(frozen=True)
class KeySet:
    """The keys of a keys file: (digest bytes, tenant) pairs, in file order."""

    entries: tuple[tuple[bytes, str], ...] = ()
    _index: dict[bytes, tuple[bytes, str]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        for digest, tenant in self.entries:
            self._index.setdefault(digest, (digest, tenant))  # the first line of a digest wins

    def tenant(self, key: str) -> str | None:
        """The tenant whose key this is, or None."""
        presented = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        stored = self._index.get(presented)
        if stored is None or not hmac.compare_digest(stored[0], presented):
            return None
        return stored[1]

    def tenants(self) -> frozenset[str]:
        """Every tenant that holds a key."""
        return frozenset(tenant for _digest, tenant in self.entries)


def parse_keys(document: Any) -> KeySet:
    """The `KeySet` of a decoded keys file; raises `KeysFileError` naming the entry."""
    if document is None:
        return KeySet()
    if not isinstance(document, list):
        raise KeysFileError("the keys file must be a YAML list of {tenant, sha256}")
    if len(document) > KEYS_MAX:
        raise KeysFileError(f"the keys file holds more than {KEYS_MAX} entries")
    entries: list[tuple[bytes, str]] = []
    for i, item in enumerate(document):
        if not isinstance(item, dict) or set(item) != {"tenant", "sha256"}:
            raise KeysFileError(f"entry {i} must have exactly tenant and sha256")
        tenant, digest = item["tenant"], item["sha256"]
        if not isinstance(tenant, str) or not tenant.strip() or len(tenant) > TENANT_MAX:
            raise KeysFileError(f"entry {i}: tenant must be 1-{TENANT_MAX} characters")
        if not isinstance(digest, str) or not _HEX.fullmatch(digest.lower()):
            raise KeysFileError(f"entry {i}: sha256 must be 64 hex digits")
        entries.append((bytes.fromhex(digest), tenant.strip()))
    return KeySet(tuple(entries))


def presented_key(authorization: Sequence[str], api_key: Sequence[str]) -> str | None:
    """The key a request presents, or None when it presents none, or more than one.

    ``authorization`` (a bearer token) and ``api_key`` are every value of those
    headers; exactly one of them must be sent, once. A blank value is no key.
    """
    if len(authorization) + len(api_key) != 1:
        return None
    if authorization:
        scheme, _, token = authorization[0].partition(" ")
        if scheme.lower() != "bearer":
            return None
        token = token.strip()
        return token or None
    value = api_key[0].strip()
    return value or None


def header_tenant(values: Sequence[str]) -> str | bool | None:
    """The tenant named by the trusted header's values: None without one, False when
    it is ambiguous (two copies, or a blank or over-long value)."""
    if not values:
        return None
    if len(values) > 1:
        return False
    value = values[0].strip()
    if not value or len(value) > TENANT_MAX:
        return False
    return value


def certificate_tenant(peercert: Mapping[str, Any] | None) -> str | None:
    """The tenant of a verified client certificate (``ssl.getpeercert()``'s form).

    The last path segment of a ``spiffe://`` URI SAN, else the subject's CN;
    None when the certificate names neither.
    """
    if not peercert:
        return None
    for kind, value in _pairs(peercert.get("subjectAltName", ())):
        if kind == "URI" and value.startswith("spiffe://"):
            segment = value[len("spiffe://") :].partition("/")[2].rstrip("/").rpartition("/")[2]
            if segment and len(segment) <= TENANT_MAX:
                return segment
            return None
    for rdn in peercert.get("subject", ()):
        for name, value in _pairs(rdn):
            if name == "commonName" and value and len(value) <= TENANT_MAX:
                return str(value)
    return None


def _pairs(items: Iterable[Any]) -> Iterable[tuple[str, str]]:
    for item in items:
        if isinstance(item, tuple) and len(item) == 2:
            yield str(item[0]), str(item[1])
