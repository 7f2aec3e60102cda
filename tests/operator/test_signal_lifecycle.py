"""Seed 000's signal-propagation lifecycle on an in-process operator, one test per rule.

Each test runs a real `Operator` over the embedded SQLite store a demo mesh
prepares, with real sockets on 127.0.0.1, and changes what the store declares.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grid.adapters.store.sqlite import SqliteStore
from grid.adapters.tls_probe import client_context
from grid.core.trust import fingerprint_pem
from grid.demo.mesh import DemoMesh
from grid.demo.pki import DevCA
from grid.demo.plan import NETWORK
from grid.demo.ports import free_port
from grid.errors import Conflict
from grid.operator.runtime import Operator
from grid.operator.settings import OperatorSettings
from grid.operator.startup import StartupError
from grid.testing.poll import eventually

from .conftest import site_settings


@dataclass
class Site:
    """East's operator running in this process, and what it was started with."""

    operator: Operator
    task: asyncio.Task[None]
    store: SqliteStore
    settings: OperatorSettings
    mesh: DemoMesh


async def _edit(store: SqliteStore, kind: str, name: str, change: Callable[[Any], None]) -> None:
    """Change an object's spec, retrying when the operator wrote its status meanwhile."""
    for _attempt in range(20):
        obj = await store.get(kind, name)
        change(obj)
        try:
            await store.replace(obj)
            return
        except Conflict:
            continue
    raise AssertionError(f"{kind} {name} kept changing under the test")


def _set_mode(mode: str) -> Callable[[Any], None]:
    def change(obj: Any) -> None:
        obj["spec"]["signalTransport"] = {"mode": mode}

    return change


def _set_trust(trust: dict[str, str]) -> Callable[[Any], None]:
    def change(obj: Any) -> None:
        obj["spec"]["tls"]["trust"] = trust

    return change


SPIFFE = {"mode": "spiffe", "trustDomain": "grid.local"}


@contextlib.asynccontextmanager
async def east(
    tmp_path: Path, *, mode: str = "gossip", trust: dict[str, str] | None = None
) -> AsyncIterator[Site]:
    mesh = DemoMesh(tmp_path / "demo", ["east", "west"], signal_transport=mode)
    await mesh.prepare()
    assert mesh.pki is not None
    plan = mesh.plan.sites["east"]
    store = await SqliteStore.open(plan.store)
    if trust is not None:
        await _edit(store, "GridNetwork", NETWORK, _set_trust(trust))
    # Own copies of the certificate files, so a test can rotate them.
    cert, key = tmp_path / "east.pem", tmp_path / "east-key.pem"
    shutil.copy(mesh.pki.sites["east"].cert, cert)
    shutil.copy(mesh.pki.sites["east"].key, key)
    settings = site_settings(
        mesh,
        "east",
        cert=cert,
        key=key,
        signals_bind=f"127.0.0.1:{free_port()}",
        signals_poll_interval_s=0.2,
        cert_check_interval_s=0.05,
        render_interval_s=0.2,
    )
    operator = Operator(settings, store)
    task = asyncio.create_task(operator.run())
    try:
        yield Site(operator, task, store, settings, mesh)
    finally:
        operator.stop()
        with contextlib.suppress(StartupError):
            await asyncio.wait_for(task, 15)
        await store.close()


async def _ready(site: Site) -> None:
    await eventually(lambda: site.operator.ready or site.task.done(), "the operator is ready")
    assert not site.task.done(), site.task


async def _exit_line(site: Site) -> str:
    await eventually(lambda: site.task.done(), "the operator exits")
    error = site.task.exception()
    assert isinstance(error, StartupError), error
    return error.message


def _port_open(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, int(port))) == 0


async def test_gossip_is_the_default_and_leaves_the_signals_port_closed(
    tmp_path: Path,
) -> None:
    async with east(tmp_path) as site:
        await _ready(site)
        assert (
            site.operator.signals.running is not None
            and site.operator.signals.running.mode == "gossip"
        )
        assert "signals" not in site.operator.addresses
        assert not _port_open(site.settings.signals_bind)


async def test_mode_is_read_once_at_start_and_a_declared_change_exits_naming_both(
    tmp_path: Path,
) -> None:
    async with east(tmp_path) as site:
        await _ready(site)
        await _edit(site.store, "GridNetwork", NETWORK, _set_mode("poll"))
        line = await _exit_line(site)
        assert "signalTransport.mode: poll" in line and "serves gossip" in line
        # No live flip: the listener was never bound by the gossip process.
        assert not _port_open(site.settings.signals_bind)


async def test_a_network_created_after_start_declaring_another_mode_exits(
    tmp_path: Path,
) -> None:
    async with east(tmp_path) as site:
        await _ready(site)
        late = {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": "late"},
            "spec": {"signalTransport": {"mode": "poll"}},
        }
        await site.store.create(late)
        line = await _exit_line(site)
        assert "'late'" in line and "poll" in line


async def test_poll_serves_own_signals_on_the_mtls_listener_with_scoring_off(
    tmp_path: Path,
) -> None:
    async with east(tmp_path, mode="poll") as site:
        await _ready(site)
        address = site.operator.addresses["signals"]
        assert address == site.settings.signals_bind
        pki = site.mesh.pki
        assert pki is not None
        own = client_context(pki.ca, site.settings.cert, site.settings.key)  # type: ignore[arg-type]
        connector = aiohttp.TCPConnector(ssl=own)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get(f"https://{address}/v1/site/signals?scope=grid") as resp,
        ):
            assert resp.status == 200
            body = await resp.json()
        assert body["site"] == "east" and body["network"] == NETWORK
        overlay = json.loads(
            (site.mesh.plan.sites["east"].overlay_dir / "grid-config.json").read_text()
        )
        assert overlay["candidates"], "east renders its own providers"
        assert all("score" not in c and "score_breakdown" not in c for c in overlay["candidates"])


async def test_peer_trust_change_restarts_under_poll(
    tmp_path: Path,
) -> None:
    async with east(tmp_path, mode="poll") as site:
        await _ready(site)
        other = DevCA().issue_site("west").fingerprint

        def repin(obj: Any) -> None:
            obj["spec"]["trust"]["certFingerprint"] = other

        await _edit(site.store, "GridSite", "west", repin)
        line = await _exit_line(site)
        assert "peer trust" in line


async def test_peer_trust_change_does_not_restart_under_gossip(
    tmp_path: Path,
) -> None:
    async with east(tmp_path) as site:
        await _ready(site)
        other = DevCA().issue_site("west").fingerprint

        def repin(obj: Any) -> None:
            obj["spec"]["trust"]["certFingerprint"] = other

        def mark(obj: Any) -> None:
            obj["metadata"]["labels"]["checked"] = "yes"

        await _edit(site.store, "GridSite", "west", repin)
        # GridSite events are handled in order: once our own later edit reached the
        # metadata lane, the trust change before it was judged and kept us running.
        await _edit(site.store, "GridSite", "east", mark)
        await eventually(
            lambda: dict(site.operator.replica.local.metadata.labels).get("checked") == "yes",
            "the later GridSite edit is published",
        )
        assert not site.task.done()


def _rotate(site: Site) -> str:
    fresh = DevCA(trust_domain="grid.local").issue_site("east")
    assert site.settings.key is not None and site.settings.cert is not None
    site.settings.key.write_bytes(fresh.key_pem)
    site.settings.cert.write_bytes(fresh.cert_pem)
    return fresh.fingerprint


def _lane_fingerprint(site: Site) -> str | None:
    pem = site.operator.replica.local.cert.pem
    return fingerprint_pem(pem.encode()) if pem else None


async def test_rotation_reads_declared_trust_under_gossip_a_switch_to_pin_stops_it(
    tmp_path: Path,
) -> None:
    async with east(tmp_path, trust=SPIFFE) as site:
        await _ready(site)
        rotated = _rotate(site)
        await eventually(lambda: _lane_fingerprint(site) == rotated, "the SVID is reloaded")
        await eventually(
            lambda: site.operator.registry.get_sample_value("grid_cert_rotations_total") == 1,
            "the rotation is counted",
        )
        await _edit(site.store, "GridNetwork", NETWORK, _set_trust({"mode": "pin"}))
        await eventually(
            lambda: (
                site.operator.served.network is not None
                and site.operator.served.network.spec.tls is not None
                and site.operator.served.network.spec.tls.trust.mode == "pin"
            ),
            "the operator sees the switch to pin",
        )
        _rotate(site)
        checks = site.operator.signals.rotation_checks
        await eventually(lambda: site.operator.signals.rotation_checks >= checks + 3, "checks run")
        assert _lane_fingerprint(site) == rotated, "pin stopped rotation"
        assert not site.task.done(), "no restart under gossip"


async def test_rotation_switch_to_pin_restarts_under_poll(
    tmp_path: Path,
) -> None:
    async with east(tmp_path, mode="poll", trust=SPIFFE) as site:
        await _ready(site)
        await _edit(site.store, "GridNetwork", NETWORK, _set_trust({"mode": "pin"}))
        line = await _exit_line(site)
        assert "peer trust" in line


async def test_more_than_one_network_fails_to_start_naming_them(
    tmp_path: Path,
) -> None:
    mesh = DemoMesh(tmp_path / "demo", ["east"])
    await mesh.prepare()
    store = await SqliteStore.open(mesh.plan.sites["east"].store)
    try:
        await store.create(
            {
                "apiVersion": "grid.praxis-proxy.io/v1alpha1",
                "kind": "GridNetwork",
                "metadata": {"name": "second"},
                "spec": {},
            }
        )
        operator = Operator(OperatorSettings(site="east", metrics_bind="127.0.0.1:0"), store)
        with pytest.raises(StartupError) as err:
            await operator.run()
        assert NETWORK in err.value.message and "second" in err.value.message
    finally:
        await store.close()
