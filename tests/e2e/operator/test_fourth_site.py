"""A fourth site started by hand joins the demo mesh, is auto-discovered, leaves and returns.

The steps are docs/operator.md's ("Adding a site by hand"), through the CLI: a
certificate from the demo's dev CA (``grid certs issue``), the demo's join
manifests and the site's own GridSite applied to a fresh store (``grid
apply``), then ``grid operator``. The demo's GridNetwork carries
``auto-discover-sites``, so every other site creates ``grid-demo-north``:
labelled, fed from north's lanes, its certificate shown, Connecting until a
person pins it. Pinned at east, it goes Active; SIGKILLed, it goes Left once dead
for ``staleCandidateTtlSeconds`` (10 s); restarted, it comes back through
Discovered to Active. Each wait is a poll with a deadline; the measured delays
are printed.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from grid.adapters.store.sqlite import SqliteStore
from grid.core.trust import contains_private_key, fingerprint_pem
from grid.demo.mesh import DemoMesh
from grid.demo.plan import NETWORK
from grid.demo.ports import free_port
from grid.errors import Conflict
from grid.testing.poll import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

SITE = "north"
DISCOVERED = f"{NETWORK}-{SITE}"
PEERS = ("east", "west", "central")


async def grid(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "grid",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode(errors="replace")
    return out.decode()


async def prepare_north(mesh: DemoMesh) -> tuple[list[str], str, str]:
    """The files and store of site north; its operator argv, egress and fingerprint."""
    root = mesh.root
    pki = mesh.plan.pki_dir
    out = await grid("certs", "issue", str(pki), "--site", SITE)
    fingerprint = out.split("fingerprint")[1].split()[0]
    site_dir = root / SITE
    site_dir.mkdir()
    egress = f"127.0.0.1:{free_port()}"
    (site_dir / "site.yaml").write_text(
        f"""apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridSite
metadata: {{name: {SITE}}}
spec:
  gridNetworkRef: {NETWORK}
  region: eu-north-1
  zone: eu-north-1a
  egress: {{address: "{egress}", tls: {{mode: Mutual, serverName: localhost}}}}
"""
    )
    store = f"sqlite:{site_dir / 'store.db'}"
    for manifest in (
        root / "join" / "network.yaml",
        root / "join" / "secrets.yaml",
        site_dir / "site.yaml",
    ):
        await grid("apply", "-f", str(manifest), "--store", store)
    argv = [
        sys.executable,
        "-m",
        "grid",
        "operator",
        "--site",
        SITE,
        "--store",
        store,
        "--swim-bind",
        f"127.0.0.1:{free_port()}",
        "--metrics-bind",
        f"127.0.0.1:{free_port()}",
        "--egress-bind",
        egress,
        "--overlay-dir",
        str(site_dir),
        "--ca",
        str(pki / "ca.pem"),
        "--cert",
        str(pki / f"{SITE}.pem"),
        "--key",
        str(pki / f"{SITE}-key.pem"),
        "--site-probe-interval",
        "0.5",
        "--record-refresh",
        "1",
    ]
    return argv, egress, fingerprint


async def discovered_at(look: Any, peer: str) -> dict[str, Any] | None:
    return (await look.objects(peer, "GridSite")).get(DISCOVERED)


def phase_of(site: dict[str, Any] | None) -> str:
    return ((site or {}).get("status") or {}).get("phase", "")


async def pin(path: Path, fingerprint: str) -> None:
    store = await SqliteStore.open(path)
    try:
        for _attempt in range(20):
            obj = await store.get("GridSite", DISCOVERED)
            obj["spec"]["trust"] = {"certFingerprint": fingerprint}
            try:
                await store.replace(obj)
                return
            except Conflict:
                continue  # the operator wrote its status meanwhile
        raise AssertionError("could not pin the discovered site")
    finally:
        await store.close()


async def test_a_fourth_site_is_discovered_leaves_and_comes_back(mesh: DemoMesh, look: Any) -> None:
    argv, egress, fingerprint = await prepare_north(mesh)
    started = time.monotonic()
    await mesh.start_child(f"operator-{SITE}", argv)

    async def everywhere() -> bool:
        sites = [await discovered_at(look, peer) for peer in PEERS]
        return all(phase_of(s) == "Connecting" for s in sites)

    await eventually(everywhere, "north is discovered at every other site", timeout_s=40)
    discovered_s = time.monotonic() - started
    for peer in PEERS:
        site = await discovered_at(look, peer)
        assert site is not None
        assert site["metadata"]["labels"] == {
            "grid.praxis-proxy.io/network": NETWORK,
            "grid.praxis-proxy.io/auto-discovered": "true",
        }
        assert site["spec"]["egress"]["address"] == egress
        assert (site["spec"]["region"], site["spec"]["zone"]) == ("eu-north-1", "eu-north-1a")
        assert "trust" not in site["spec"]
        pem = site["status"]["publicCertPem"]
        assert fingerprint_pem(pem.encode()) == fingerprint and not contains_private_key(pem)
    # Trust is a person's: pinned at east, north goes Active there only.
    await pin(look.store_path("east"), fingerprint)
    await eventually(
        lambda: _phase_is(look, "east", "Active"), "north Active at east", timeout_s=15
    )
    assert phase_of(await discovered_at(look, "west")) == "Connecting"

    mesh.kill_operator(SITE, signal.SIGKILL)
    killed = time.monotonic()
    await eventually(lambda: _phase_is(look, "east", "Left"), "north Left at east", timeout_s=30)
    left_s = time.monotonic() - killed
    site = await discovered_at(look, "east")
    assert site is not None and site["status"]["reason"] == "MemberDead"
    # Dead for the 10 s TTL after a 2 s suspicion: never sooner than the TTL.
    assert left_s >= 10.0, left_s
    await eventually(lambda: _phase_is(look, "west", "Left"), "north Left at west", timeout_s=10)

    await mesh.start_operator(SITE)
    back = time.monotonic()
    await eventually(
        lambda: _phase_is(look, "east", "Active"), "north Active at east again", timeout_s=30
    )
    back_s = time.monotonic() - back
    assert phase_of(await discovered_at(look, "west")) in ("Discovered", "Connecting")
    print(
        f"north discovered everywhere after {discovered_s:.1f} s; Left at east "
        f"{left_s:.1f} s after SIGKILL; Active again {back_s:.1f} s after restart"
    )


async def _phase_is(look: Any, peer: str, phase: str) -> bool:
    return phase_of(await discovered_at(look, peer)) == phase
