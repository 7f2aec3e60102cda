"""TLS for a provider's health checks and scrapes, from Secrets in the store (§2a).

``healthCheck.tls`` and ``metricsConfig.tls`` name a CA bundle (``caSecretRef``)
and a client certificate with its key (``clientCertificateSecretRef``). This
module reads those Secrets from the resource store and builds an
`ssl.SSLContext` that verifies the provider against the CA and presents the
client certificate. Secret bytes never reach a log line, an exception message or
status: a failure is a `ProviderTlsError` naming the Secret and key only.

Python's ``ssl`` loads a certificate chain from files only, so the client
certificate and key pass through a private temporary directory (mode 0700,
files 0600) that is removed as soon as the context holds them.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from pathlib import Path

from grid.adapters.store.port import ResourceStore
from grid.core.resources.provider_spec import ProviderTls
from grid.errors import GridError, NotFound

SECRET_VALUE_MAX_BYTES = 1024 * 1024
"""Largest CA bundle, certificate or key read from a Secret. Real chains are a few KiB;
the bound keeps a mistaken Secret from being parsed at any size."""


class ProviderTlsError(GridError):
    """A provider TLS Secret is missing, lacks its key, or does not load."""

    code = "provider_tls_unavailable"


async def secret_bytes(
    store: ResourceStore,
    name: str,
    namespace: str,
    key: str,
    error: type[GridError] = ProviderTlsError,
) -> bytes:
    """The value of ``key`` in Secret ``namespace/name`` (``data`` or ``stringData``).

    A missing Secret or key, bad base64 or an oversized value raises ``error``
    with a message naming the Secret and the key only.
    """
    where = f"Secret {namespace}/{name} key {key!r}"
    try:
        obj = await store.get("Secret", name, namespace=namespace)
    except NotFound:
        raise error(f"{where}: Secret not found") from None
    encoded = (obj.get("data") or {}).get(key)
    if isinstance(encoded, str):
        try:
            value = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise error(f"{where}: not valid base64") from None
    else:
        plain = (obj.get("stringData") or {}).get(key)
        if not isinstance(plain, str):
            raise error(f"{where}: key missing")
        value = plain.encode()
    if len(value) > SECRET_VALUE_MAX_BYTES:
        raise error(f"{where}: larger than {SECRET_VALUE_MAX_BYTES} bytes")
    return value


async def provider_ssl_context(store: ResourceStore, tls: ProviderTls) -> ssl.SSLContext:
    """A client context verifying the provider and presenting the client certificate."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca_ref = tls.ca_secret_ref
    if ca_ref is not None:
        ca = await secret_bytes(store, ca_ref.name, ca_ref.namespace, ca_ref.key)
        try:
            ctx.load_verify_locations(cadata=ca.decode("ascii"))
        except (ssl.SSLError, UnicodeDecodeError, ValueError):
            raise ProviderTlsError(
                f"Secret {ca_ref.namespace}/{ca_ref.name} key {ca_ref.key!r}: not a PEM CA bundle"
            ) from None
    client = tls.client_certificate_secret_ref
    if client is not None:
        cert = await secret_bytes(store, client.name, client.namespace, client.certificate_key)
        key = await secret_bytes(store, client.name, client.namespace, client.private_key_key)
        load_chain(ctx, cert, key, f"Secret {client.namespace}/{client.name}")
    return ctx


def load_chain(
    ctx: ssl.SSLContext,
    cert: bytes,
    key: bytes,
    where: str,
    error: type[GridError] = ProviderTlsError,
) -> None:
    """Load a certificate chain and its key from memory into ``ctx`` (``error`` when they
    do not load, naming ``where`` only), through a private directory removed at once."""
    with tempfile.TemporaryDirectory(prefix="grid-tls-") as tmp:
        os.chmod(tmp, 0o700)
        cert_path, key_path = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        try:
            ctx.load_cert_chain(str(cert_path), str(key_path))
        except (ssl.SSLError, ValueError):
            raise error(f"{where}: the certificate or key does not load") from None
