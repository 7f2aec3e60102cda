"""An operator started with upstream Grid's environment variables alone joins a mesh.

Two real ``grid operator`` processes on loopback. East runs as the demo starts
it, with flags. West is started the way upstream's chart starts its operator:
no argument after ``grid operator``, and only upstream's variables
(``GRID_SWIM_SITE_NAME``, ``GRID_SWIM_BIND_ADDR``, ``GRID_SWIM_ADVERTISE_ADDR``,
``GRID_SWIM_SEEDS``, ``GRID_SWIM_ENCRYPT_KEY`` in hex, ``GRID_METRICS_ADDR``,
``GRID_SWIM_DEAD_MEMBER_TTL_SECS``) in an environment without any other
``GRID_*`` name. Its store is the default one (``.grid/store.db`` under its
working directory), whose GridNetwork lists no seeds, names no SWIM key Secret
and names its certificates by ``caSecretRef``/``siteSecretRef``: the seeds, the
key and the certificates can only have come from upstream's variables and the
Secrets. The test waits until each sees the other alive over SWIM, west has
verified east's egress over mTLS with the certificate read from its Secret,
and west's /metrics (on ``GRID_METRICS_ADDR``) carries upstream's probe and
phase metrics and passes ``promtool check metrics``.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from grid.adapters.store.sqlite import SqliteStore
from grid.demo import plan as p
from grid.demo.mesh import DemoMesh
from grid.demo.ports import free_port
from grid.testing.poll import eventually

pytestmark = [pytest.mark.e2e]


async def prepare_west(mesh: DemoMesh, cwd: Path) -> None:
    """West's store as the default path under ``cwd``, without seeds or a key Secret."""
    assert mesh.pki is not None
    store_path = cwd / ".grid" / "store.db"
    store_path.parent.mkdir(parents=True)
    shutil.copy(mesh.plan.sites["west"].store, store_path)
    store = await SqliteStore.open(store_path)
    try:
        certs = mesh.pki.sites["west"]
        await store.create(
            p.secret_doc(
                "west-tls", {"tls.crt": certs.cert.read_bytes(), "tls.key": certs.key.read_bytes()}
            )
        )
        (net,) = await store.list("GridNetwork")
        net["spec"]["seeds"] = []
        tls = net["spec"]["tls"]
        tls.pop("swimKeyRef")
        tls["siteSecretRef"] = {"name": "west-tls", "namespace": p.NAMESPACE}
        await store.replace(net)
    finally:
        await store.close()


async def metrics_of(address: str) -> str | None:
    try:
        reader, writer = await asyncio.open_connection(*address.rsplit(":", 1))
    except OSError:
        return None
    writer.write(f"GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n".encode())
    body = (await reader.read()).decode(errors="replace")
    writer.close()
    return body.split("\r\n\r\n", 1)[1] if " 200 " in body.split("\r\n", 1)[0] else None


def alive(text: str | None) -> float:
    for family in text_string_to_metric_families(text or ""):
        for sample in family.samples:
            if sample.name == "grid_swim_members" and sample.labels.get("state") == "alive":
                return sample.value
    return 0.0


async def phase_at(store_path: Path, site: str) -> str:
    store = await SqliteStore.open(store_path)
    try:
        obj = await store.get("GridSite", site)
    finally:
        await store.close()
    return str((obj.get("status") or {}).get("phase", ""))


async def test_an_operator_on_upstream_variables_alone_joins_the_mesh(tmp_path: Path) -> None:
    mesh = DemoMesh(tmp_path / "demo", ["east", "west"], gateways=False)
    await mesh.prepare()
    assert mesh.pki is not None
    cwd = tmp_path / "west"
    await prepare_west(mesh, cwd)
    east = mesh.plan.sites["east"]
    west_swim, west_metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_")}
    env |= {
        "GRID_SWIM_SITE_NAME": "west",
        "GRID_SWIM_BIND_ADDR": west_swim,
        "GRID_SWIM_ADVERTISE_ADDR": west_swim,
        "GRID_SWIM_SEEDS": f"127.0.0.1:{east.swim_port}",
        "GRID_SWIM_ENCRYPT_KEY": mesh.pki.swim_key.read_bytes().hex(),
        "GRID_METRICS_ADDR": west_metrics,
        "GRID_SWIM_DEAD_MEMBER_TTL_SECS": "120",
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    with (logs / "east.log").open("wb") as east_log, (logs / "west.log").open("wb") as west_log:
        east_proc = await asyncio.create_subprocess_exec(
            *mesh.operator_argv(east), stdout=east_log, stderr=subprocess.STDOUT
        )
        west_proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "grid", "operator",
            cwd=cwd, env=env, stdout=west_log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:

            async def joined() -> bool:
                for proc in (east_proc, west_proc):
                    assert proc.returncode is None, (logs / "west.log").read_text()
                east_view = await metrics_of(f"127.0.0.1:{east.metrics_port}")
                west_view = await metrics_of(west_metrics)
                return alive(east_view) >= 1 and alive(west_view) >= 1

            await eventually(joined, "east and west see each other alive", timeout_s=60)

            async def verified() -> bool:
                assert west_proc.returncode is None, (logs / "west.log").read_text()
                return await phase_at(cwd / ".grid" / "store.db", "east") == "Active"

            await eventually(verified, "west verifies east's egress with its Secret's certificate")
            text = await metrics_of(west_metrics)
            assert text is not None
            found = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }
            verified_probes = (("outcome", "Verified"), ("tls_mode", "Mutual"))
            assert found["grid_gateway_probe_total", verified_probes] >= 1
            assert found["grid_gateway_probe_duration_seconds_count", ()] >= 1
            moved = [
                dict(labels) for name, labels in found if name == "grid_site_phase_transition_total"
            ]
            assert {
                "from_phase": "Connecting",
                "to_phase": "Active",
                "reason": "FingerprintVerified",
            } in moved
            promtool = shutil.which("promtool")
            assert promtool is not None, "make test installs Debian prometheus (promtool)"
            check = subprocess.run(
                [promtool, "check", "metrics"],
                input=text.encode(),
                capture_output=True,
                check=False,
            )
            assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
            key = env["GRID_SWIM_ENCRYPT_KEY"]
            assert key not in (logs / "west.log").read_text()
            assert base64.b64encode(bytes.fromhex(key)).decode() not in text
        finally:
            for proc in (east_proc, west_proc):
                if proc.returncode is None:
                    proc.terminate()
            for proc in (east_proc, west_proc):
                try:
                    await asyncio.wait_for(proc.wait(), 20)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
