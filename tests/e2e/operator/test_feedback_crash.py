"""SIGKILL of a real ``grid operator`` between the durable feedback write and its 204.

The operator runs as a child process under poll with the test-only fault hook
(`grid.operator.feedback_ingest.KILL_HOOK_ENV`) set, so it kills itself right
after the first feedback status write is durable and before it answers. The
gateway's reporter sees no answer and keeps its evidence; once the operator is
back (without the hook), the resend is an exact duplicate: acknowledged, and
nothing is doubled or renewed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grid.adapters.store.sqlite import SqliteStore
from grid.adapters.tls_probe import client_context
from grid.demo.mesh import DemoMesh
from grid.demo.plan import NETWORK
from grid.gateway.feedback import Delivery, FeedbackReporter, HttpIngestTransport
from grid.operator.feedback_ingest import KILL_HOOK_ENV
from grid.testing.poll import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]

START_DEADLINE_S = 30.0


@contextlib.asynccontextmanager
async def operator_process(
    mesh: DemoMesh, log: Path, *, kill_hook: bool
) -> AsyncIterator[asyncio.subprocess.Process]:
    """East's operator as a child process; stopped (if still alive) on exit."""
    env = {k: v for k, v in os.environ.items() if k != KILL_HOOK_ENV}
    if kill_hook:
        env[KILL_HOOK_ENV] = "1"
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            *mesh.operator_argv(mesh.plan.sites["east"]),
            env=env,
            stdout=out,
            stderr=out,
            stdin=asyncio.subprocess.DEVNULL,
        )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def wait_serving(
    proc: asyncio.subprocess.Process, url: str, session: aiohttp.ClientSession, log: Path
) -> None:
    """Poll GET /v1/site/signals until it answers 200, with a deadline."""

    async def serving() -> bool:
        assert proc.returncode is None, log.read_text()[-2000:]
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                return resp.status == 200
        return False

    try:
        await eventually(
            serving, "the signals listener", timeout_s=START_DEADLINE_S, interval_s=0.1
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{log.read_text()[-2000:]}") from None


async def persisted(path: Path) -> dict[str, Any]:
    store = await SqliteStore.open(path)
    try:
        return dict((await store.get("GridNetwork", NETWORK)).get("status") or {})
    finally:
        await store.close()


async def test_a_crash_between_write_and_answer_leaves_one_consistent_report(
    tmp_path: Path,
) -> None:
    mesh = DemoMesh(tmp_path / "demo", ["east", "west"], signal_transport="poll")
    await mesh.prepare()
    assert mesh.pki is not None
    east = mesh.plan.sites["east"]
    certs = mesh.pki.sites["east"]
    own = client_context(mesh.pki.ca, certs.cert, certs.key)
    address = f"127.0.0.1:{east.signals_port}"
    log = tmp_path / "operator-east.log"
    transport = HttpIngestTransport(address, own, 10.0)
    reporter = FeedbackReporter(
        transport, reporter_id="gw-east", replica="east-0", epoch=5, rng=random.Random(2)
    )
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=own))
    try:
        async with operator_process(mesh, log, kill_hook=True) as proc:
            await wait_serving(proc, f"https://{address}/v1/site/signals", session, log)
            sent = reporter.record(accepted=False)
            assert await reporter.send_once() is Delivery.RETRY  # no answer: killed
            await asyncio.wait_for(proc.wait(), 10)
            assert proc.returncode == -signal.SIGKILL
        assert reporter.pending == sent
        before = await persisted(east.store)
        (durable,) = before["gatewayFeedback"]["reporters"]
        assert (durable["sequence"], durable["rejected"], durable["evidence"]) == ("1", "1", True)

        async with operator_process(mesh, log, kill_hook=False) as proc:
            await wait_serving(proc, f"https://{address}/v1/site/signals", session, log)
            assert await reporter.send_once() is Delivery.ACKED  # the resend: a duplicate
            after = await persisted(east.store)
            assert after["gatewayFeedback"] == before["gatewayFeedback"], "nothing doubled"
            ingest = next(c for c in after["conditions"] if c["type"] == "GatewayIngest")
            assert ingest["reason"] == "RejectedEvidence" and ingest["message"].startswith("1 ")
            # The next clean report with the same counter clears the evidence.
            reporter.record(accepted=True)
            assert await reporter.send_once() is Delivery.ACKED
            final = await persisted(east.store)
        (reporter_state,) = final["gatewayFeedback"]["reporters"]
        assert (reporter_state["sequence"], reporter_state["rejected"]) == ("2", "1")
        assert final["gatewayFeedback"]["reportersWithEvidence"] == 0
    finally:
        await transport.close()
        await session.close()
