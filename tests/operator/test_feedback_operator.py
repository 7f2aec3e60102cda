"""Ingest feedback on a real in-process operator under poll, over its SQLite store.

The operator is wired as ``grid operator`` wires it; these tests reach it only
through its sockets: the mTLS signals listener and the metrics listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grid.adapters.store.sqlite import SqliteStore
from grid.adapters.tls_probe import client_context
from grid.cli.operator_cmd import operator_cmd
from grid.core.signals.feedback import Report, report_headers
from grid.demo.mesh import DemoMesh
from grid.demo.plan import NETWORK
from grid.demo.ports import free_port
from grid.operator.runtime import Operator
from grid.operator.startup import StartupError
from grid.testing.poll import eventually

from .conftest import site_settings

EVENTS = {"conflict", "conflict_exhausted", "overflow", "unauthorized", "write_failure"}


@contextlib.asynccontextmanager
async def east(
    tmp_path: Path, *, ingest_feedback: bool = True
) -> AsyncIterator[tuple[Operator, SqliteStore, aiohttp.ClientSession]]:
    mesh = DemoMesh(tmp_path / "demo", ["east", "west"], signal_transport="poll")
    await mesh.prepare()
    assert mesh.pki is not None
    plan = mesh.plan.sites["east"]
    store = await SqliteStore.open(plan.store)
    settings = site_settings(
        mesh,
        "east",
        signals_bind=f"127.0.0.1:{free_port()}",
        render_interval_s=0.2,
        ingest_feedback=ingest_feedback,
    )
    operator = Operator(settings, store)
    task = asyncio.create_task(operator.run())
    own = client_context(mesh.pki.ca, mesh.pki.sites["east"].cert, mesh.pki.sites["east"].key)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=own))
    try:
        await eventually(lambda: operator.ready or task.done(), "the operator is ready")
        assert not task.done(), task
        yield operator, store, session
    finally:
        await session.close()
        operator.stop()
        with contextlib.suppress(StartupError):
            await asyncio.wait_for(task, 15)
        await store.close()


async def _post(
    operator: Operator, session: aiohttp.ClientSession, report: Report
) -> tuple[int, dict[str, str], bytes]:
    url = f"https://{operator.addresses['signals']}/v1/site/signals/ingest"
    async with session.post(url, headers=report_headers(report)) as resp:
        return resp.status, dict(resp.headers), await resp.read()


async def _metrics(operator: Operator) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{operator.addresses['metrics']}/metrics") as resp,
    ):
        return await resp.text()


async def _network_status(store: SqliteStore) -> dict[str, Any]:
    return dict((await store.get("GridNetwork", NETWORK)).get("status") or {})


async def test_the_operator_persists_feedback_and_its_metrics_pass_promtool(
    tmp_path: Path,
) -> None:
    async with east(tmp_path) as (operator, store, session):
        status, headers, body = await _post(
            operator, session, Report("gw-east", "east-0", 9, 1, 1, False)
        )
        assert (status, body) == (204, b"")
        assert headers["x-grid-ingest-epoch"] == "9" and headers["x-grid-ingest-sequence"] == "1"
        persisted = await _network_status(store)
        ingest = next(c for c in persisted["conditions"] if c["type"] == "GatewayIngest")
        assert (ingest["status"], ingest["reason"]) == ("False", "RejectedEvidence")
        assert persisted["gatewayFeedback"]["reportersWithEvidence"] == 1
        text = await _metrics(operator)
    events = {
        line.split('event="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith("grid_gateway_feedback_events_total{")
    }
    assert events == EVENTS
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool (Debian package prometheus) is installed by make test"
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_without_ingest_feedback_the_post_is_405_and_polling_works(
    tmp_path: Path,
) -> None:
    async with east(tmp_path, ingest_feedback=False) as (operator, store, session):
        status, headers, body = await _post(
            operator, session, Report("gw-east", "east-0", 9, 1, 0, True)
        )
        assert status == 405 and b'"method_not_allowed"' in body
        assert not {"x-grid-ingest-epoch", "x-grid-ingest-sequence"} & {k.lower() for k in headers}
        signals = f"https://{operator.addresses['signals']}/v1/site/signals?scope=grid"
        async with session.get(signals) as resp:
            assert resp.status == 200
        assert "gatewayFeedback" not in await _network_status(store)
        assert 'grid_gateway_feedback_events_total{event="overflow"}' in await _metrics(operator)


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {}, True),
        (["--no-ingest-feedback"], {}, False),
        ([], {"GRID_INGEST_FEEDBACK": "false"}, False),
        (["--ingest-feedback"], {"GRID_INGEST_FEEDBACK": "false"}, True),
    ],
)
def test_the_flag_and_its_environment_fallback(
    monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], expected: bool
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    context = operator_cmd.make_context("operator", ["--site", "east", *args])
    assert context.params["ingest_feedback"] is expected
    assert context.params["feedback_reporter_capacity"] == 64
    assert context.params["feedback_write_attempts"] == 3
