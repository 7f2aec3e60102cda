"""A poll-mode gateway against a real operator: it ranks by the operator's signals and
its ingest feedback is acknowledged and persisted on the GridNetwork."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml

from grid.adapters.store.sqlite import SqliteStore
from grid.demo.mesh import DemoMesh
from grid.demo.ports import free_port
from grid.testing.gateway import GatewayProcess, spawn_gateway
from grid.testing.poll import eventually

pytestmark = [pytest.mark.e2e]


@pytest_asyncio.fixture
async def mesh(tmp_path: Path) -> AsyncIterator[DemoMesh]:
    demo = DemoMesh(tmp_path / "mesh", ["east"], gateways=False, signal_transport="poll")
    try:
        await demo.prepare()
        await demo.start()
        await demo.wait_ready()
        yield demo
    finally:
        await demo.stop()


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


async def _evidence(store_path: Path) -> tuple[int, str] | None:
    """(reporters with evidence, the GatewayIngest status), or None before either is there."""
    store = await SqliteStore.open(store_path)
    try:
        networks = await store.list("GridNetwork")
    finally:
        await store.close()
    status = networks[0].get("status") or {}
    feedback = status.get("gatewayFeedback")
    condition = next(
        (c for c in status.get("conditions", []) if c.get("type") == "GatewayIngest"), None
    )
    if feedback is None or condition is None:
        return None
    return int(feedback.get("reportersWithEvidence", 0)), str(condition["status"])


def _evidence_is(store_path: Path, expected: tuple[int, str]) -> Any:
    async def check() -> bool:
        return await _evidence(store_path) == expected

    return check


async def _snapshot(admin: str) -> dict[str, Any] | None:
    try:
        async with aiohttp.ClientSession() as http, http.get(f"http://{admin}/snapshot") as r:
            return dict(await r.json()) if r.status == 200 else None
    except aiohttp.ClientError:
        return None


async def test_a_gateway_polls_and_reports_to_a_real_poll_mode_operator(
    mesh: DemoMesh, tmp_path: Path
) -> None:
    site = mesh.plan.sites["east"]
    assert mesh.pki is not None
    certs = mesh.pki.sites["east"]
    praxis = site.overlay_dir / "praxis.yaml"
    await eventually(praxis.exists, "the operator renders praxis.yaml", timeout_s=30)
    document = yaml.safe_load(praxis.read_text())
    route = document["filter_chains"][0]["filters"][2]
    assert "scoring" in route and "east" in route["sites"]  # poll mode carries them
    public, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    document["listeners"][0]["address"] = public
    document["admin"]["address"] = admin
    # The gateway reads its own copy of the operator's envelope, so the test can break it.
    envelope_path = tmp_path / "grid-overlay.json"
    good = (site.overlay_dir / "grid-overlay.json").read_bytes()
    envelope_path.write_bytes(good)
    route["overlay_file"] = str(envelope_path)
    config = tmp_path / "praxis.yaml"
    config.write_text(yaml.safe_dump(document))
    gateway: GatewayProcess = await spawn_gateway(
        config, public, admin,
        "--operator", f"127.0.0.1:{site.signals_port}",
        "--cert", str(certs.cert), "--key", str(certs.key), "--ca", str(mesh.pki.ca),
    )  # fmt: skip
    try:

        async def polled() -> bool:
            view = await _snapshot(admin)
            return bool(view and view["signals"]["providers"] > 0)

        async def acknowledged() -> bool:
            view = await _snapshot(admin)
            return bool(view and view["feedback"]["acknowledged_sequence"] is not None)

        await eventually(polled, "signals pulled from the operator", timeout_s=30)  # type: ignore[arg-type]
        await eventually(acknowledged, "feedback acknowledged", timeout_s=30)  # type: ignore[arg-type]
        view = await _snapshot(admin)
        assert view is not None and view["feedback"]["rejected"] == 0
        assert await _evidence(site.store) == (0, "True")

        # A reload the verifier rejects becomes evidence on the GridNetwork...
        broken = json.loads(good)
        broken["content_digest"]["value"] = "0" * 64
        _replace(envelope_path, json.dumps(broken).encode())
        await eventually(  # type: ignore[arg-type]
            _evidence_is(site.store, (1, "False")), "evidence persisted", timeout_s=30
        )
        # ...and a good reload clears it.
        _replace(envelope_path, good + b"\n")
        await eventually(  # type: ignore[arg-type]
            _evidence_is(site.store, (0, "True")), "evidence cleared", timeout_s=30
        )
    finally:
        await gateway.stop()
