"""Fixtures for the operator end-to-end tests: one real three-site mesh per module.

`mesh` is a `DemoMesh` (east, west, central) of real ``grid operator`` and
``grid mock-provider`` processes on loopback, started once per test module and
always stopped at teardown. One deliberate flaw is planted before it starts:
central's copy of the GridSite ``west`` pins a wrong certificate fingerprint, so
central must never see west Active while every other site pair goes Active.
Routing does not depend on GridSite phases, so the other tests are unaffected.

`look` bundles the read-only probes the tests share (overlay files, store
objects, /metrics); the tests wait with `grid.testing.poll.eventually`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from grid.adapters.store.sqlite import SqliteStore
from grid.demo.mesh import DemoMesh
from grid.demo.plan import NAMESPACE, NETWORK

SITES = ["east", "west", "central"]
MISPINNED = ("central", "west")
"""(store, GridSite): central's copy of west's GridSite pins a wrong fingerprint."""
WRONG_FINGERPRINT = hashlib.sha256(b"not the certificate west presents").hexdigest()


@dataclass(frozen=True)
class Overlay:
    """One site's overlay as read from its two files."""

    config: dict[str, Any]
    envelope: dict[str, Any]

    @property
    def candidates(self) -> list[dict[str, Any]]:
        """The ranked candidates of the envelope's overlay."""
        return list(self.envelope["overlay"]["candidates"])

    @property
    def revision(self) -> str:
        """The envelope's revision value."""
        return str(self.envelope["revision"]["value"])

    def find(self, cluster: str) -> dict[str, Any] | None:
        """The candidate routed to ``cluster``, if listed."""
        return next((c for c in self.candidates if c["cluster"] == cluster), None)

    def clusters(self) -> set[tuple[str, str]]:
        """Every listed (site, cluster)."""
        return {(c["site"], c["cluster"]) for c in self.candidates}


def read_overlay(directory: Path) -> Overlay | None:
    """Both overlay files of a site, or None while either is missing or unreadable."""
    try:
        config = json.loads((directory / "grid-config.json").read_text())
        envelope = json.loads((directory / "grid-overlay.json").read_text())
    except (OSError, ValueError):
        return None
    return Overlay(config, envelope)


async def store_list(path: Path, kind: str) -> list[dict[str, Any]]:
    """Every object of ``kind`` in an embedded store, read directly."""
    store = await SqliteStore.open(path)
    try:
        return await store.list(kind)
    finally:
        await store.close()


async def http_text(url: str) -> str | None:
    """GET ``url``; the body, or None when nothing answers."""
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp,
        ):
            return await resp.text()
    except (aiohttp.ClientError, TimeoutError):
        return None


class Tools:
    """The helpers above, handed to tests through fixtures (tests cannot import conftest)."""

    read_overlay = staticmethod(read_overlay)
    store_list = staticmethod(store_list)
    http_text = staticmethod(http_text)


class Look(Tools):
    """Read-only probes into a running `DemoMesh`."""

    def __init__(self, mesh: DemoMesh) -> None:
        self.mesh = mesh

    def overlay(self, site: str) -> Overlay | None:
        """The site's current overlay files."""
        return read_overlay(self.mesh.plan.sites[site].overlay_dir)

    def store_path(self, site: str) -> Path:
        """The site's embedded store."""
        return self.mesh.plan.sites[site].store

    async def objects(self, site: str, kind: str) -> dict[str, dict[str, Any]]:
        """The site's ``kind`` objects by name."""
        return {o["metadata"]["name"]: o for o in await store_list(self.store_path(site), kind)}

    async def grid_id(self, site: str) -> str | None:
        """``status.gridId`` of the GridNetwork in the site's store."""
        network = (await self.objects(site, "GridNetwork"))[NETWORK]
        return (network.get("status") or {}).get("gridId")

    def provider_port(self, name: str) -> int:
        """The port of a mock provider by name."""
        return next(p.port for p in self.mesh.plan.providers if p.name == name)

    async def provider_gauge(self, name: str, metric: str) -> float | None:
        """One unlabelled-by-us gauge value from a mock provider's /metrics."""
        text = await http_text(f"http://127.0.0.1:{self.provider_port(name)}/metrics")
        for line in (text or "").splitlines():
            if line.startswith(metric + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    async def operator_metrics(self, site: str) -> str | None:
        """The operator's /metrics text, or None when it is down."""
        port = self.mesh.plan.sites[site].metrics_port
        return await http_text(f"http://127.0.0.1:{port}/metrics")

    async def ready(self, site: str) -> bool:
        """True when the operator's /readyz answers 200."""
        port = self.mesh.plan.sites[site].metrics_port
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(
                    f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=1)
                ) as resp,
            ):
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    def expected_scope(self, site: str) -> dict[str, str]:
        """The scope the site's overlay must carry."""
        gateway = self.mesh.plan.sites[site].gateway
        return {"network": NETWORK, "gateway": gateway, "namespace": NAMESPACE, "local_site": site}


async def _pin_wrong_fingerprint(mesh: DemoMesh) -> None:
    store_site, target = MISPINNED
    store = await SqliteStore.open(mesh.plan.sites[store_site].store)
    try:
        site = await store.get("GridSite", target)
        site["spec"]["trust"]["certFingerprint"] = WRONG_FINGERPRINT
        await store.replace(site)
    finally:
        await store.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mesh(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DemoMesh]:
    """A running three-site mesh with one mispinned GridSite; stopped at teardown."""
    demo = DemoMesh(tmp_path_factory.mktemp("mesh"), SITES)
    try:
        await demo.prepare()
        await _pin_wrong_fingerprint(demo)
        await demo.start()
        yield demo
    finally:
        await demo.stop()


@pytest.fixture
def tools() -> Tools:
    """The shared helpers, for tests without the module mesh."""
    return Tools()


@pytest.fixture(scope="module")
def look(mesh: DemoMesh) -> Look:
    """Probes into the module's mesh."""
    return Look(mesh)
