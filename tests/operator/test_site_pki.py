"""Site certificates from ``spec.tls.caSecretRef``/``siteSecretRef``, read through the store.

Without ``--ca``/``--cert``/``--key`` the operator reads the grid CA and its
site certificate from the Secrets its GridNetwork names (on SQLite and on the
Kubernetes API emulator alike), writes them into a private directory, and runs
on them: two in-process operators on real sockets, one on files and one on
Secrets, verify each other's egress over mTLS. A changed Secret is followed:
under spiffe trust the new certificate is loaded live; under pin trust the
operator stops for a restart with one clear line.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import stat
from pathlib import Path
from typing import Any

import pytest

from grid.adapters.store.sqlite import SqliteStore
from grid.core.resources import GridNetwork
from grid.core.resources.phases import SitePhase
from grid.core.trust import fingerprint_pem, public_chain_pem
from grid.demo import plan as p
from grid.demo.mesh import DemoMesh
from grid.demo.pki import DEFAULT_TRUST_DOMAIN, DevCA
from grid.operator.runtime import Operator
from grid.operator.settings import OperatorSettings
from grid.operator.site_pki import SitePkiError, with_site_pki
from grid.operator.startup import StartupError
from grid.testing.poll import eventually

from .conftest import site_settings

API = "grid.praxis-proxy.io/v1alpha1"
SITE_SECRET = "site-tls"


def tls_secret(name: str, items: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": p.NAMESPACE},
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v).decode() for k, v in items.items()},
    }


def network(**tls: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "GridNetwork",
        "metadata": {"name": "prod"},
        "spec": {"tls": tls},
    }


def refs(ca_key: str | None = None) -> dict[str, Any]:
    ca_ref: dict[str, str] = {"name": "grid-ca", "namespace": p.NAMESPACE}
    if ca_key is not None:
        ca_ref["key"] = ca_key
    return {"caSecretRef": ca_ref, "siteSecretRef": {"name": SITE_SECRET, "namespace": p.NAMESPACE}}


async def test_the_secrets_fill_the_missing_files(store: Any, pki: Any, tmp_path: Path) -> None:
    east = pki.sites["east"]
    cert, key, ca = east.cert.read_bytes(), east.key.read_bytes(), pki.ca.read_bytes()
    await store.create(network(**refs()))
    await store.create(tls_secret("grid-ca", {"ca.crt": ca, "ca.key": b"never read"}))
    await store.create(tls_secret(SITE_SECRET, {"tls.crt": cert, "tls.key": key}))
    settings, site_pki = await with_site_pki(OperatorSettings(site="east"), store)
    assert site_pki is not None
    try:
        assert settings.ca is not None and settings.cert is not None and settings.key is not None
        assert (settings.ca.read_bytes(), settings.cert.read_bytes()) == (ca, cert)
        assert settings.key.read_bytes() == key
        assert stat.S_IMODE(site_pki.directory.stat().st_mode) == 0o700
        for path in (settings.ca, settings.cert, settings.key):
            assert path.parent == site_pki.directory
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert sorted(f.name for f in site_pki.directory.iterdir()) == [
            "ca.crt",
            "tls.crt",
            "tls.key",
        ]
        # A flag wins over its Secret: only the site pair comes from the store here.
        flagged, pair_only = await with_site_pki(OperatorSettings(site="east", ca=pki.ca), store)
        assert pair_only is not None and pair_only.ca is None and flagged.ca == pki.ca
        pair_only.close()
        assert not pair_only.directory.exists()
        files = OperatorSettings(site="east", ca=pki.ca, cert=east.cert, key=east.key)
        assert await with_site_pki(files, store) == (files, None)
    finally:
        site_pki.close()
    assert not site_pki.directory.exists()


async def test_a_named_ca_key_is_read_and_no_reference_means_no_files(store: Any, pki: Any) -> None:
    await store.create(network())
    assert await with_site_pki(OperatorSettings(site="east"), store) == (
        OperatorSettings(site="east"),
        None,
    )
    net = await store.get("GridNetwork", "prod")
    net["spec"]["tls"] = {"caSecretRef": refs("bundle.pem")["caSecretRef"]}
    await store.replace(net)
    await store.create(tls_secret("grid-ca", {"bundle.pem": pki.ca.read_bytes()}))
    settings, site_pki = await with_site_pki(OperatorSettings(site="east"), store)
    assert site_pki is not None
    try:
        assert settings.ca is not None and settings.ca.read_bytes() == pki.ca.read_bytes()
        assert settings.cert is None and settings.key is None
    finally:
        site_pki.close()


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (None, f"Secret {p.NAMESPACE}/{SITE_SECRET} key 'tls.crt': Secret not found"),
        ({"tls.crt": b"x"}, f"Secret {p.NAMESPACE}/{SITE_SECRET} key 'tls.key': key missing"),
        (
            {"tls.crt": b"not a cert", "tls.key": b"not a key"},
            "keys 'tls.crt' and 'tls.key': the certificate or key does not load",
        ),
    ],
)
async def test_an_unusable_secret_refuses_the_start_naming_it_only(
    store: Any, pki: Any, items: dict[str, bytes] | None, message: str, caplog: Any
) -> None:
    await store.create(network(**refs()))
    await store.create(tls_secret("grid-ca", {"ca.crt": pki.ca.read_bytes()}))
    if items is not None:
        await store.create(tls_secret(SITE_SECRET, items))
    with caplog.at_level(logging.DEBUG), pytest.raises(SitePkiError) as info:
        await with_site_pki(OperatorSettings(site="east"), store)
    assert message in info.value.message
    assert "not a key" not in info.value.message and "not a key" not in caplog.text


async def use_secrets(mesh: DemoMesh, name: str, trust: dict[str, str] | None = None) -> None:
    """Point the site's GridNetwork at the demo CA Secret and a kubernetes.io/tls Secret."""
    assert mesh.pki is not None
    certs = mesh.pki.sites[name]
    store = await SqliteStore.open(mesh.plan.sites[name].store)
    try:
        secret = {"tls.crt": certs.cert.read_bytes(), "tls.key": certs.key.read_bytes()}
        await store.create(tls_secret(SITE_SECRET, secret))
        (net,) = await store.list("GridNetwork")
        net["spec"]["tls"]["siteSecretRef"] = {"name": SITE_SECRET, "namespace": p.NAMESPACE}
        if trust is not None:
            net["spec"]["tls"]["trust"] = trust
        await store.replace(net)
    finally:
        await store.close()


def secret_settings(mesh: DemoMesh, name: str, **overrides: Any) -> OperatorSettings:
    site = mesh.plan.sites[name]
    fields = {
        "swim_bind": f"127.0.0.1:{site.swim_port}",
        "egress_bind": f"127.0.0.1:{site.egress_port}",
        "site_probe_interval_s": 0.2,
        "cert_check_interval_s": 0.1,
    }
    return site_settings(mesh, name, **(fields | overrides))


async def test_an_operator_on_secrets_and_one_on_files_verify_each_other(tmp_path: Path) -> None:
    mesh = DemoMesh(tmp_path, ["east", "west"])
    await mesh.prepare()
    assert mesh.pki is not None
    await use_secrets(mesh, "east")
    stores = {n: await SqliteStore.open(mesh.plan.sites[n].store) for n in ("east", "west")}
    east = await Operator.prepared(
        secret_settings(mesh, "east", ca=None, cert=None, key=None), stores["east"]
    )
    west = Operator(secret_settings(mesh, "west"), stores["west"])
    assert east.pki is not None and east.settings.cert == east.pki.cert
    tasks = [asyncio.create_task(o.run()) for o in (east, west)]
    try:

        def both_active() -> bool:
            for task in tasks:
                assert not task.done(), task
            return (
                east.sites.phases.get("west") is SitePhase.ACTIVE
                and west.sites.phases.get("east") is SitePhase.ACTIVE
            )

        await eventually(both_active, "each verifies the other's egress", timeout_s=30)
        pem = east.replica.local.cert.pem.encode()
        assert fingerprint_pem(pem) == mesh.pki.sites["east"].fingerprint
    finally:
        for operator in (east, west):
            operator.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        for store in stores.values():
            await store.close()
    assert not east.pki.directory.exists()


async def renew(store: SqliteStore, name: str, ca: DevCA | None = None) -> bytes:
    """Write a newly issued certificate for ``name`` into the site Secret; its PEM."""
    issued = (ca or DevCA()).issue_site(name)
    obj = await store.get("Secret", SITE_SECRET, namespace=p.NAMESPACE)
    obj["data"] = {
        "tls.crt": base64.b64encode(issued.cert_pem).decode(),
        "tls.key": base64.b64encode(issued.key_pem).decode(),
    }
    await store.replace(obj)
    return issued.cert_pem


async def test_under_pin_a_renewed_certificate_restarts_the_operator(tmp_path: Path) -> None:
    mesh = DemoMesh(tmp_path, ["east"])
    await mesh.prepare()
    await use_secrets(mesh, "east")
    store = await SqliteStore.open(mesh.plan.sites["east"].store)
    operator = await Operator.prepared(
        secret_settings(mesh, "east", ca=None, cert=None, key=None), store
    )
    assert operator.pki is not None
    task = asyncio.create_task(operator.run())
    try:
        await eventually(lambda: operator.ready or task.done(), "ready", timeout_s=20)
        new = await renew(store, "east")
        with pytest.raises(StartupError, match="site certificate Secret changed; restarting"):
            await asyncio.wait_for(task, 30)
        assert operator.pki.material.cert == new
    finally:
        if not task.done():
            operator.stop()
            await asyncio.gather(task, return_exceptions=True)
        await store.close()


async def test_under_spiffe_a_renewed_certificate_is_loaded_live(tmp_path: Path) -> None:
    mesh = DemoMesh(tmp_path, ["east"])
    await mesh.prepare()
    assert mesh.pki is not None
    await use_secrets(mesh, "east", {"mode": "spiffe", "trustDomain": DEFAULT_TRUST_DOMAIN})
    store = await SqliteStore.open(mesh.plan.sites["east"].store)
    operator = await Operator.prepared(
        secret_settings(mesh, "east", ca=None, cert=None, key=None), store
    )
    assert operator.pki is not None and operator.settings.cert is not None
    task = asyncio.create_task(operator.run())
    try:
        await eventually(lambda: operator.ready or task.done(), "ready", timeout_s=20)
        assert not task.done()
        root = mesh.pki.ca.parent
        ca = DevCA.load(mesh.pki.ca.read_bytes(), (root / "ca-key.pem").read_bytes())
        new = await renew(store, "east", ca)

        def reloaded() -> bool:
            assert not task.done(), task
            return operator.signals.rotations._value.get() >= 1  # type: ignore[attr-defined]

        await eventually(reloaded, "the rotation loop reloads the Secret's certificate")
        assert operator.settings.cert.read_bytes() == new
        await eventually(
            lambda: operator.replica.local.cert.pem == public_chain_pem(new),
            "the cert lane carries the renewed certificate",
        )
    finally:
        operator.stop()
        await asyncio.gather(task, return_exceptions=True)
        await store.close()


async def test_check_follows_only_its_secrets_and_keeps_material_it_cannot_read(
    store: Any, pki: Any, caplog: Any
) -> None:
    east = pki.sites["east"]
    await store.create(network(**refs()))
    ca_secret = await store.create(tls_secret("grid-ca", {"ca.crt": pki.ca.read_bytes()}))
    site_secret = await store.create(
        tls_secret(
            SITE_SECRET, {"tls.crt": east.cert.read_bytes(), "tls.key": east.key.read_bytes()}
        )
    )
    _settings, site_pki = await with_site_pki(OperatorSettings(site="east"), store)
    assert site_pki is not None
    try:
        net = GridNetwork.model_validate(await store.get("GridNetwork", "prod"))
        other = tls_secret("unrelated", {"x": b"y"})
        await site_pki.check(store, net, other)  # not ours: not even read
        await site_pki.check(store, net, ca_secret)  # ours, unchanged: nothing
        assert site_pki.reloads == 0
        await store.delete("Secret", SITE_SECRET, namespace=p.NAMESPACE)
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                await site_pki.check(store, net, site_secret)
        assert caplog.text.count("keeping the current material") == 1
        assert site_pki.cert is not None and site_pki.cert.read_bytes() == east.cert.read_bytes()
        moved = net.model_copy(deep=True)
        assert moved.spec.tls is not None and moved.spec.tls.site_secret_ref is not None
        moved.spec.tls.site_secret_ref.name = "renamed"
        with pytest.raises(StartupError, match="names other Secrets"):
            await site_pki.check(store, moved)
    finally:
        site_pki.close()
