"""Fixtures of the operator tests: an in-memory store that counts writes, and dev certificates."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grid.demo.pki import DevCA
from grid.testing.store import InMemoryStore


class CountingStore(InMemoryStore):
    """The in-memory store, counting every write call by (operation, kind)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[tuple[str, str]] = Counter()

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls["create", obj["kind"]] += 1
        return await super().create(obj)

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls["replace", obj["kind"]] += 1
        return await super().replace(obj)

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
        return await super().patch_status(kind, name, status, resource_version, namespace=namespace)

    def writes(self, kind: str) -> int:
        """Write calls of any operation for ``kind``."""
        return sum(n for (_op, k), n in self.calls.items() if k == kind)


@pytest.fixture
def store() -> CountingStore:
    """A fresh counting in-memory store."""
    return CountingStore()


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
