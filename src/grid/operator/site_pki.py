"""The site's certificates from the GridNetwork's ``caSecretRef`` and ``siteSecretRef`` Secrets.

Files given with ``--ca``, ``--cert`` and ``--key`` win: they are the embedded
default. Where they are not given and the served GridNetwork names the Secrets,
the operator reads them through the store, as upstream Grid does on Kubernetes:

* the grid CA from ``caSecretRef`` at its ``key`` (``ca.crt`` when it names none);
  the CA's private key (upstream's ``ca.key``) is never read;
* the site certificate and key from ``siteSecretRef`` at ``tls.crt`` and
  ``tls.key`` (the ``kubernetes.io/tls`` layout cert-manager writes). A ``key`` on
  this reference is not used: the Secret holds two values.

Python's ``ssl`` loads a chain only from files, so the PEMs are written into a
private directory (0700, files 0600, removed when the operator stops) and the
settings point there: everything downstream runs the same code as with files.

Reloaded on change: an event of one of the two Secrets makes `SitePki.check`
read them again and rewrite the files when their content moved.
Under spiffe trust a new site certificate and key are then picked up live by the
certificate rotation loop (`grid.operator.lifecycle`), as mounted SVID files are.
Any other change (a new CA, a new site certificate under pin trust, or a
GridNetwork naming other Secrets) stops the process with one clear line, so its supervisor restarts
it with trust roots, pins and the item signer built fresh from the new material.
A Secret that becomes unreadable keeps the material in use and is logged once.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography import x509

from grid.adapters.provider_tls import load_chain, secret_bytes
from grid.adapters.store.port import ResourceStore
from grid.core.resources import GridNetwork
from grid.core.resources.object_meta import SecretRef
from grid.operator.output import atomic_write
from grid.operator.settings import OperatorSettings
from grid.operator.startup import StartupError, select_network

log = logging.getLogger(__name__)

CA_KEY_DEFAULT = "ca.crt"
"""Key of the caSecretRef Secret read when the reference names none (upstream's)."""
CERT_KEY = "tls.crt"
"""Key of the site certificate (chain) in the siteSecretRef Secret."""
KEY_KEY = "tls.key"
"""Key of the site private key in the siteSecretRef Secret."""


class SitePkiError(StartupError):
    """A referenced Secret is missing, lacks its key, or does not hold a usable PEM."""


@dataclass(frozen=True)
class SecretMaterial:
    """What the referenced Secrets hold now: each PEM, or None where no reference asks."""

    ca_ref: SecretRef | None
    site_ref: SecretRef | None
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None

    def only(self, *, ca: bool, site: bool) -> SecretMaterial:
        """This material without the parts a flag supplies instead."""
        kept = self if ca else replace(self, ca_ref=None, ca=None)
        return kept if site else replace(kept, site_ref=None, cert=None, key=None)


def _digest(*parts: bytes | None) -> str:
    """A SHA-256 over ``parts``, to compare material without keeping two copies of it."""
    hashed = hashlib.sha256()
    for part in parts:
        hashed.update(b"\0" if part is None else b"\1" + part)
    return hashed.hexdigest()


async def read_material(store: ResourceStore, network: GridNetwork) -> SecretMaterial:
    """Read and check the network's caSecretRef and siteSecretRef (raises `SitePkiError`)."""
    tls = network.spec.tls
    ca_ref = tls.ca_secret_ref if tls is not None else None
    site_ref = tls.site_secret_ref if tls is not None else None
    material = SecretMaterial(ca_ref, site_ref)
    if ca_ref is not None:
        key = ca_ref.key or CA_KEY_DEFAULT
        ca = await secret_bytes(store, ca_ref.name, ca_ref.namespace, key, SitePkiError)
        try:
            x509.load_pem_x509_certificates(ca)
        except ValueError:
            where = f"Secret {ca_ref.namespace}/{ca_ref.name} key {key!r}"
            raise SitePkiError(f"{where}: holds no PEM certificate") from None
        material = replace(material, ca=ca)
    if site_ref is not None:
        name, namespace = site_ref.name, site_ref.namespace
        cert = await secret_bytes(store, name, namespace, CERT_KEY, SitePkiError)
        key_pem = await secret_bytes(store, name, namespace, KEY_KEY, SitePkiError)
        where = f"Secret {namespace}/{name} keys {CERT_KEY!r} and {KEY_KEY!r}"
        load_chain(ssl.create_default_context(), cert, key_pem, where, SitePkiError)
        material = replace(material, cert=cert, key=key_pem)
    return material


class SitePki:
    """The directory the Secrets' PEMs are written to, and their reload on change."""

    def __init__(self, material: SecretMaterial, directory: Path | None = None) -> None:
        self.directory = directory or Path(tempfile.mkdtemp(prefix="grid-site-pki-"))
        self.directory.chmod(0o700)
        self.material = material
        self._handles = {"ca": material.ca_ref is not None, "site": material.site_ref is not None}
        self.reloads = 0
        """Times the files were rewritten after their Secrets changed."""
        self._unreadable = False
        self._write(material)

    @property
    def ca(self) -> Path | None:
        """The grid CA file, when caSecretRef supplies it."""
        return self.directory / "ca.crt" if self._handles["ca"] else None

    @property
    def cert(self) -> Path | None:
        """The site certificate file, when siteSecretRef supplies it."""
        return self.directory / CERT_KEY if self._handles["site"] else None

    @property
    def key(self) -> Path | None:
        """The site key file, when siteSecretRef supplies it."""
        return self.directory / KEY_KEY if self._handles["site"] else None

    def _write(self, material: SecretMaterial) -> None:
        for path, data in (
            (self.ca, material.ca),
            (self.cert, material.cert),
            (self.key, material.key),
        ):
            if path is not None and data is not None:
                atomic_write(path, data, mode=0o600)

    def _refs(self, network: GridNetwork) -> tuple[SecretRef | None, SecretRef | None]:
        tls = network.spec.tls
        ca = tls.ca_secret_ref if tls is not None and self._handles["ca"] else None
        site = tls.site_secret_ref if tls is not None and self._handles["site"] else None
        return ca, site

    async def check(
        self,
        store: ResourceStore,
        network: GridNetwork | None,
        secret: Mapping[str, Any] | None = None,
    ) -> None:
        """Follow a change: ``secret`` is the Secret an event named, None for a GridNetwork
        event (which only compares the references). Rewrites changed files, and raises
        `StartupError` when the change needs a restart."""
        if network is None:
            return
        old = self.material
        if self._refs(network) != (old.ca_ref, old.site_ref):
            raise StartupError("GridNetwork spec.tls names other Secrets; restarting to read them")
        meta = (secret or {}).get("metadata") or {}
        named = (meta.get("namespace"), meta.get("name"))
        if named not in {(r.namespace, r.name) for r in (old.ca_ref, old.site_ref) if r}:
            return
        try:
            fresh = (await read_material(store, network)).only(**self._handles)
        except SitePkiError as exc:
            if not self._unreadable:
                log.warning(
                    "site certificate Secret unreadable; keeping the current material",
                    extra={"code": exc.code, "reason": exc.message},
                )
            self._unreadable = True
            return
        self._unreadable = False
        ca_moved = _digest(old.ca) != _digest(fresh.ca)
        site_moved = _digest(old.cert, old.key) != _digest(fresh.cert, fresh.key)
        if not (ca_moved or site_moved):
            return
        self._write(fresh)
        self.material = fresh
        self.reloads += 1
        tls = network.spec.tls
        if ca_moved or tls is None or tls.trust.mode != "spiffe":
            what = "grid CA" if ca_moved else "site certificate"
            raise StartupError(f"the {what} Secret changed; restarting to apply it")
        log.info("site certificate Secret changed; the rotation loop reloads it")

    def close(self) -> None:
        """Remove the directory and the material in it."""
        shutil.rmtree(self.directory, ignore_errors=True)


async def with_site_pki(
    settings: OperatorSettings, store: ResourceStore
) -> tuple[OperatorSettings, SitePki | None]:
    """``settings`` with the Secrets' PEM files filling what ``--ca``/``--cert``/``--key`` left.

    None when the files cover everything or the network names neither Secret.
    A flag wins over its Secret; ``--cert`` and ``--key`` count as one pair.
    """
    need_ca = settings.ca is None
    need_site = settings.cert is None and settings.key is None
    if not (need_ca or need_site):
        return settings, None
    network = await select_network(store, settings.network)
    material = (await read_material(store, network)).only(ca=need_ca, site=need_site)
    if material.ca_ref is None and material.site_ref is None:
        return settings, None
    pki = SitePki(material)
    filled = {
        "ca": settings.ca or pki.ca,
        "cert": settings.cert or pki.cert,
        "key": settings.key or pki.key,
    }
    log.info(
        "site certificates read from Secrets",
        extra={"ca": pki.ca is not None, "site": pki.cert is not None},
    )
    return settings.model_copy(update=filled), pki
