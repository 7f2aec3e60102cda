"""`grid telemetry-gateway` as a real process, and `grid telemetry roster|records`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from click.testing import CliRunner

from grid.cli import main
from grid.demo.pki import DevCA
from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import Ack, EventBatch, InventoryBatch
from grid.testing.poll import eventually

GRID = [sys.executable, "-c", "from grid.cli import main; main()"]


def _grid(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GRID, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("telemetry-pki")
    ca = DevCA()
    paths = {"ca": directory / "ca.pem"}
    paths["ca"].write_bytes(ca.cert_pem)
    for name, spiffe in (("gateway", None), ("agent", "agent/a1")):
        issued = ca.issue(name, spiffe_path=spiffe)
        paths[name] = directory / f"{name}.pem"
        paths[f"{name}-key"] = directory / f"{name}-key.pem"
        paths[name].write_bytes(issued.cert_pem)
        paths[f"{name}-key"].write_bytes(issued.key_pem)
    return paths


AGENT = "spiffe://grid.local/agent/a1"


@pytest.fixture
def gateway(certs: dict[str, Path], tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A running `grid telemetry-gateway` on 127.0.0.1:0 with the embedded backbone."""
    config = tmp_path / "gateway.yaml"
    config.write_text(f"listen: 0.0.0.0:1\ngateway_id: from-file\ndata_dir: {tmp_path / 'data'}\n")
    proc = subprocess.Popen(
        [
            *GRID,
            "telemetry-gateway",
            "--config",
            str(config),
            "--listen",
            "127.0.0.1:0",
            "--cert",
            str(certs["gateway"]),
            "--key",
            str(certs["gateway-key"]),
            "--client-ca",
            str(certs["ca"]),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        yield proc, ready["listening"]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


async def _post(certs: dict[str, Path], address: str, route: str, body: bytes) -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    context.load_cert_chain(certs["agent"], certs["agent-key"])
    port = address.rpartition(":")[2]
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
        session.post(
            f"https://localhost:{port}/v1/{route}",
            data=body,
            headers={"Content-Type": "application/x-protobuf"},
        ) as response,
    ):
        return response.status, await response.read()


def _events(n: int) -> bytes:
    batch = EventBatch(protocol_version=1, schema_version=1)
    for i in range(n):
        event = batch.events.add(record_id=f"e{i}", type="cpu")
        event.observed_at.seconds = int(time.time())
        event.origin.agent_id = "forged"
    return batch.SerializeToString()


async def test_gateway_process_serves_admits_via_cli_and_records_audit(
    gateway: tuple[subprocess.Popen[str], str], certs: dict[str, Path], tmp_path: Path
) -> None:
    proc, address = gateway
    data = str(tmp_path / "data")
    assert address.startswith("127.0.0.1:") and not address.endswith(":0")
    assert (await _post(certs, address, "events", _events(2)))[0] == 403

    added = await asyncio.to_thread(
        _grid, "telemetry", "roster", "add", AGENT, "--tenant", "t1", "--data-dir", data
    )
    admitted = await asyncio.to_thread(
        _grid, "telemetry", "roster", "admit", AGENT, "--data-dir", data
    )
    assert added.returncode == 0 and admitted.returncode == 0, added.stderr + admitted.stderr
    assert json.loads(admitted.stdout)["state"] == "admitted"

    async def answered(status: int, body: bytes) -> tuple[int, bytes] | None:
        result = await _post(certs, address, "events", body)
        return result if result[0] == status else None

    # The change reaches the running gateway within 1 s of the append.
    result = await eventually(
        lambda: answered(200, _events(2)), "the admission reaches the gateway", timeout_s=1.0
    )
    ack = Ack.FromString(result[1])
    inv = InventoryBatch(protocol_version=1, schema_version=1)
    inv.records.add(record_id="i0", type="host").observed_at.seconds = int(time.time())
    assert (await _post(certs, address, "inventory", inv.SerializeToString()))[0] == 200

    audit = await asyncio.to_thread(_grid, "telemetry", "records", "--data-dir", data, "-o", "json")
    lines = [json.loads(line) for line in audit.stdout.splitlines()]
    assert [(r["record_id"], r["route"]) for r in lines] == [
        ("e0", "events"),
        ("e1", "events"),
        ("i0", "inventory"),
    ]
    first = lines[0]
    assert set(first) == {"batch_id", "record_id", "route", "origin", "reception", "observed_at"}
    assert first["batch_id"] == ack.batch_id
    assert first["origin"] == {"agent_id": AGENT, "tenant_id": "t1"}
    assert first["reception"]["gateway_id"] == "from-file" and first["reception"]["request_id"]

    suspended = await asyncio.to_thread(
        _grid, "telemetry", "roster", "suspend", AGENT, "--data-dir", data
    )
    assert suspended.returncode == 0
    await eventually(
        lambda: answered(403, _events(3)), "the suspension reaches the gateway", timeout_s=1.0
    )

    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 10) == 0


def test_roster_commands_validate_transitions(tmp_path: Path) -> None:
    runner = CliRunner()
    data = ["--data-dir", str(tmp_path)]
    assert runner.invoke(main, ["telemetry", "roster", "admit", "a1", *data]).exit_code == 1
    assert runner.invoke(main, ["telemetry", "roster", "add", "a1", *data]).exit_code == 2
    assert (
        runner.invoke(main, ["telemetry", "roster", "add", "a1", "--tenant", "t", *data]).exit_code
        == 0
    )
    again = runner.invoke(main, ["telemetry", "roster", "add", "a1", "--tenant", "t", *data])
    assert again.exit_code == 1 and "already" in again.output
    assert runner.invoke(main, ["telemetry", "roster", "revoke", "a1", *data]).exit_code == 0
    assert runner.invoke(main, ["telemetry", "roster", "admit", "a1", *data]).exit_code == 1
    listed = runner.invoke(main, ["telemetry", "roster", "list", "-o", "json", *data])
    assert json.loads(listed.output) == {
        "agent_id": "a1",
        "tenant_id": "t",
        "state": "revoked",
        "revision": 2,
    }


def test_records_without_a_backbone_is_an_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["telemetry", "records", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1


def test_gateway_flags_cover_every_setting_and_bad_config_is_a_usage_error(tmp_path: Path) -> None:
    from grid.core.telemetry.settings import GatewaySettings

    help_text = CliRunner().invoke(main, ["telemetry-gateway", "--help"]).output
    for name in GatewaySettings.model_fields:
        assert f"--{name.replace('_', '-')}" in help_text
    bad = tmp_path / "bad.yaml"
    bad.write_text("no_such_setting: 1\n")
    result = CliRunner().invoke(main, ["telemetry-gateway", "--config", str(bad)])
    assert result.exit_code == 2 and "no_such_setting" in result.output


def test_missing_certificate_exits_nonzero_without_a_traceback(tmp_path: Path) -> None:
    result = _grid(
        "telemetry-gateway",
        "--listen",
        "127.0.0.1:0",
        "--cert",
        str(tmp_path / "missing.pem"),
        "--key",
        str(tmp_path / "missing-key.pem"),
        "--client-ca",
        str(tmp_path / "ca.pem"),
        "--data-dir",
        str(tmp_path),
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stdout == ""
    assert os.listdir(tmp_path) == []
