"""Fixtures of the operator tests: a store per backend that counts writes, and dev certificates."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grid.adapters.store.port import ResourceStore
from grid.adapters.store.sqlite import SqliteStore
from grid.demo.mesh import DemoMesh
from grid.demo.pki import DevCA
from grid.operator.runtime import Operator
from grid.operator.settings import OperatorSettings
from grid.testing.kube_api import KubeApiEmulator, connect_store


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run ``after_operator_suite`` tests last: they read what the others recorded."""
    last = [item for item in items if item.get_closest_marker("after_operator_suite")]
    items[:] = [item for item in items if item not in last] + last


class CountingStore:
    """A store of the parametrized backend, counting every write call by (operation, kind).

    It delegates every call, so the controllers under test talk to the real
    backend (the SQLite file, or the Kubernetes store over HTTP to the emulator).
    On Kubernetes, calls made by Grid's code go out as the operator and calls a
    test makes for its own setup go out through a second client as the harness,
    so the emulator's RBAC audit holds only what the operator itself asked for.
    """

    def __init__(self, inner: ResourceStore, harness: ResourceStore | None = None) -> None:
        self.inner = inner
        self.harness = harness
        self.calls: Counter[tuple[str, str]] = Counter()

    def _pick(self) -> ResourceStore:
        if self.harness is None:
            return self.inner
        frame = sys._getframe(2)
        for _ in range(64):  # an awaiting coroutine's frame is on the stack while it runs
            if frame is None:
                break
            module = str(frame.f_globals.get("__name__", ""))
            if module.startswith("grid.") and not module.startswith("grid.testing"):
                return self.inner
            frame = frame.f_back  # type: ignore[assignment]
        return self.harness

    async def get(self, kind: str, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        return await self._pick().get(kind, name, namespace=namespace)

    async def list(
        self, kind: str, label_selector: Any = None, *, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        return await self._pick().list(kind, label_selector, namespace=namespace)

    def watch(self, kind: str, since_resource_version: str | None = None) -> Any:
        return self._pick().watch(kind, since_resource_version)

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls["create", obj["kind"]] += 1
        return await self._pick().create(obj)

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls["replace", obj["kind"]] += 1
        return await self._pick().replace(obj)

    async def patch_status(
        self,
        kind: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
        *,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        self.calls["patch_status", kind] += 1
        return await self._pick().patch_status(
            kind, name, status, resource_version, namespace=namespace
        )

    async def delete(self, kind: str, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        self.calls["delete", kind] += 1
        return await self._pick().delete(kind, name, namespace=namespace)

    async def close(self) -> None:
        await self.inner.close()
        if self.harness is not None:
            await self.harness.close()

    def writes(self, kind: str) -> int:
        """Write calls of any operation for ``kind``."""
        return sum(n for (_op, k), n in self.calls.items() if k == kind)


OPERATOR_NAMESPACE = "grid"
"""The namespace the operator runs in (its Events and Lease live there)."""
STORE_BACKENDS = ["sqlite", "kubernetes"]
"""The controller suite runs once per backend with the same assertions."""


@pytest.fixture(params=STORE_BACKENDS)
async def store(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    kube_audit: Counter[Any],
) -> AsyncIterator[CountingStore]:
    """A fresh counting store on the SQLite file or on the Kubernetes API emulator."""
    emulator: KubeApiEmulator | None = None
    inner: ResourceStore
    harness: ResourceStore | None = None
    where = tmp_path_factory.mktemp("store")  # not tmp_path: tests list their own files there
    if request.param == "sqlite":
        inner = await SqliteStore.open(where / "store.db", watch_poll_interval_s=0.02)
    else:
        emulator = KubeApiEmulator(bookmark_interval_s=0.2)
        await emulator.start()
        inner = await connect_store(emulator, where, event_namespace=OPERATOR_NAMESPACE)
        harness = await connect_store(emulator, where, agent="grid-test-harness")
    counting = CountingStore(inner, harness)
    try:
        yield counting
    finally:
        await counting.close()
        if emulator is not None:
            await emulator.stop()
            kube_audit.update(emulator.audit)


@pytest.fixture(scope="session")
def kube_audit() -> Counter[Any]:
    """Every (verb, group, resource, namespace) the controllers sent the emulator."""
    return Counter()


@dataclass(frozen=True)
class SiteFiles:
    """One site's certificate and key files, and the certificate's fingerprint."""

    cert: Path
    key: Path
    fingerprint: str


@dataclass(frozen=True)
class Pki:
    """A dev CA and certificates for east, west and central, on disk."""

    ca: Path
    sites: dict[str, SiteFiles]


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Certificates made once per session with the dev CA."""
    root = tmp_path_factory.mktemp("pki")
    ca = DevCA()
    (root / "ca.pem").write_bytes(ca.cert_pem)
    sites = {}
    for name in ("east", "west", "central"):
        issued = ca.issue_site(name)
        cert, key = root / f"{name}.pem", root / f"{name}-key.pem"
        cert.write_bytes(issued.cert_pem)
        key.write_bytes(issued.key_pem)
        sites[name] = SiteFiles(cert, key, issued.fingerprint)
    return Pki(root / "ca.pem", sites)


def site_settings(mesh: DemoMesh, name: str, **overrides: Any) -> OperatorSettings:
    """Settings of an in-process operator for demo site ``name``: its store file, its
    overlay directory and certificates, and free ports (``overrides`` win)."""
    assert mesh.pki is not None
    site, certs = mesh.plan.sites[name], mesh.pki.sites[name]
    fields: dict[str, Any] = {
        "site": name,
        "store": f"sqlite:{site.store}",
        "swim_bind": "127.0.0.1:0",
        "metrics_bind": "127.0.0.1:0",
        "overlay_dir": site.overlay_dir,
        "ca": mesh.pki.ca,
        "cert": certs.cert,
        "key": certs.key,
    }
    return OperatorSettings(**(fields | overrides))


@contextlib.asynccontextmanager
async def running(
    operator: Operator, stop_timeout_s: float = 60
) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``operator`` for the block; stop it after, unless it already ended."""
    task = asyncio.create_task(operator.run())
    try:
        yield task
    finally:
        if not task.done():
            operator.stop()
            await asyncio.wait_for(task, stop_timeout_s)
