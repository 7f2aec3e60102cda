"""The operator's /metrics: SWIM drops, discarded PEMs, members, push-pull, reconcile times,
the state gauges the alert rules read (phases, freshness, failed rounds), and
upstream Grid's probe and phase-transition metrics under upstream's names.

One operator runs on real sockets; a garbage datagram is sent to its SWIM port
so a drop reason moves. The exposition must hold every family with its whole
closed label set, and pass ``promtool check metrics``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from grid.adapters.store.sqlite import SqliteStore
from grid.adapters.udp import DROP_REASONS, parse_address
from grid.core.resources.phases import NetworkPhase, SitePhase
from grid.demo.mesh import DemoMesh
from grid.operator.runtime import Operator
from grid.testing.poll import eventually

from .conftest import running, site_settings


async def scrape(address: str) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{address}/metrics") as response,
    ):
        assert response.status == 200
        return await response.text()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


async def test_metrics_export_every_counter_with_closed_labels(tmp_path: Path) -> None:
    mesh = DemoMesh(tmp_path, ["east"])
    await mesh.prepare()
    store = await SqliteStore.open(mesh.plan.sites["east"].store)
    egress = f"127.0.0.1:{mesh.plan.sites['east'].egress_port}"
    settings = site_settings(mesh, "east", egress_bind=egress, site_probe_interval_s=0.2)
    operator = Operator(settings, store)
    try:
        async with running(operator) as task:
            await eventually(lambda: operator.ready or task.done(), "ready", timeout_s=20)
            assert not task.done()
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.sendto(b"NOTGRID-" * 8, parse_address(operator.addresses["swim"]))

            async def dropped() -> bool:
                text = await scrape(operator.addresses["metrics"])
                key = (
                    "grid_swim_frames_dropped_total",
                    (("reason", "bad_magic"), ("transport", "datagram")),
                )
                rounds = ("grid_reconcile_duration_seconds_count", (("loop", "render"),))
                verified = (
                    "grid_gateway_probe_total",
                    (("outcome", "Verified"), ("tls_mode", "Mutual")),
                )
                found = samples(text)
                return all(found.get(k, 0) >= 1 for k in (key, rounds, verified))

            await eventually(dropped, "the drop and a verified probe are exported", timeout_s=20)
            text = await scrape(operator.addresses["metrics"])
            found = samples(text)
            for transport in ("datagram", "stream"):
                for reason in DROP_REASONS:
                    labels = (("reason", reason), ("transport", transport))
                    assert ("grid_swim_frames_dropped_total", labels) in found
            assert ("grid_swim_private_key_pems_discarded_total", ()) in found
            for outcome in ("started", "completed", "failed", "served"):
                assert ("grid_swim_push_pull_exchanges_total", (("outcome", outcome),)) in found
            for direction in ("sent", "received"):
                assert ("grid_swim_push_pull_bytes_total", (("direction", direction),)) in found
            for state in ("alive", "suspect", "dead", "left"):
                assert ("grid_swim_members", (("state", state),)) in found
            for loop in ("sites", "render"):
                assert ("grid_reconcile_duration_seconds_count", (("loop", loop),)) in found
            _check_state_gauges(found)
            # Upstream Grid's names: the egress probe and the GridSite phase transitions.
            probes = ("grid_gateway_probe_total", (("outcome", "Verified"), ("tls_mode", "Mutual")))
            assert found[probes] >= 1
            assert found["grid_gateway_probe_duration_seconds_count", ()] >= 1
            moved = [k for k in found if k[0] == "grid_site_phase_transition_total"]
            assert {dict(k[1])["to_phase"] for k in moved} >= {"Connecting", "Active"}
            promtool = shutil.which("promtool")
            if promtool is None:
                pytest.skip("promtool not installed (make test installs Debian prometheus)")
            check = subprocess.run(
                [promtool, "check", "metrics"],
                input=text.encode(),
                capture_output=True,
                check=False,
            )
            assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
    finally:
        await store.close()


def _check_state_gauges(found: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> None:
    """Every phase of each state set is exported, exactly one of them at 1."""
    site = {
        phase: value
        for (name, labels), value in found.items()
        if name == "grid_site_phase" and ("site", "east") in labels
        for key, phase in labels
        if key == "phase"
    }
    assert set(site) == {p.value for p in SitePhase} and sum(site.values()) == 1
    network = [v for (name, _), v in found.items() if name == "grid_network_phase"]
    assert len(network) == len(NetworkPhase) and sum(network) == 1
    assert found[("grid_overlay_failed_rounds", ())] == 0
    fresh = {
        dict(labels)["cluster"]
        for (name, labels), _ in found.items()
        if name == ("grid_overlay_candidate_fresh")
    }
    # Whatever the first rounds rendered (the vllm providers join once checked).
    assert fresh and fresh <= {"vllm-east-a", "vllm-east-b", "bedrock-llama", "openai"}
