"""Leader election: the Lease protocol in-process, and failover between two operator processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from grid.adapters.kube.client import ClientSettings, KubeClient, load_configuration
from grid.adapters.kube.lease import LeadershipLost, LeaseElector, LeaseSettings
from grid.demo.ports import PortPicker
from grid.testing.kube_api import KubeApiEmulator, connect_store
from grid.testing.poll import eventually

FAST = LeaseSettings(lease_duration_s=2.0, renew_deadline_s=1.4, retry_period_s=0.2)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def emulator(kube_audit: Counter[Any]) -> AsyncIterator[KubeApiEmulator]:
    emu = KubeApiEmulator()
    await emu.start()
    yield emu
    await emu.stop()
    kube_audit.update(emu.audit)


async def _client(emulator: KubeApiEmulator, tmp_path: Path, name: str) -> KubeClient:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(emulator.kubeconfig()))
    return KubeClient(await load_configuration(path), ClientSettings(backoff_base_s=0.01))


async def test_one_of_two_racing_candidates_wins_and_takes_over_only_after_expiry(
    emulator: KubeApiEmulator, tmp_path: Path
) -> None:
    clock = Clock()
    clients = [await _client(emulator, tmp_path, n) for n in ("a", "b")]
    a, b = (
        LeaseElector(c, "grid-operator-east", "grid", n, FAST, monotonic=clock)
        for c, n in zip(clients, ("a", "b"), strict=True)
    )
    try:
        won = await asyncio.gather(a.try_acquire_or_renew(), b.try_acquire_or_renew())
        assert sorted(won) == [False, True]
        leader, follower = (a, b) if won[0] else (b, a)
        assert emulator.lease_holders() == {"grid/grid-operator-east": leader.identity}
        assert not await follower.try_acquire_or_renew()  # first sight starts its clock
        leader.check()
        clock.now += 1.2
        assert leader.is_leader  # within the 1.4 s renew deadline, but past the write
        with pytest.raises(LeadershipLost):  # deadline 1.1 s: half the 0.6 s margin earlier
            leader.check()
        clock.now += 0.7
        assert not await follower.try_acquire_or_renew()
        assert leader.is_leader is False  # 1.9 s > renew deadline: it stopped leading
        with pytest.raises(LeadershipLost):
            leader.check()
        clock.now += 0.2
        assert await follower.try_acquire_or_renew()
        assert emulator.lease_holders() == {"grid/grid-operator-east": follower.identity}
        assert not await leader.try_acquire_or_renew()
        (lease,) = emulator.objects_of("Lease")
        assert lease["spec"]["leaseTransitions"] == 1
        await follower.release()
        assert emulator.lease_holders() == {"grid/grid-operator-east": ""}
    finally:
        for client in clients:
            await client.close()


async def _readyz(port: int) -> tuple[int, str]:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(2)) as r,
        ):
            return r.status, await r.text()
    except (aiohttp.ClientError, TimeoutError):
        return 0, ""


async def test_the_standby_takes_over_a_paused_leader_and_two_never_lead_at_once(
    emulator: KubeApiEmulator, tmp_path: Path
) -> None:
    store = await connect_store(emulator, tmp_path, agent="grid-test-harness")
    await store.create(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": "grid-demo"},
            "spec": {},
        }
    )
    await store.close()
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump(emulator.kubeconfig()))
    key = tmp_path / "swim.key"
    key.write_bytes(bytes(range(32)))
    pick = PortPicker()
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    for name in ("a", "b"):
        metrics = pick()
        cmd = [
            sys.executable, "-m", "grid", "operator", "--site", "east",
            "--store", "kubernetes", "--kubeconfig", str(kubeconfig), "--leader-election",
            "--lease-duration", "2", "--renew-deadline", "1.4", "--retry-period", "0.2",
            "--swim-bind", f"127.0.0.1:{pick()}", "--metrics-bind", f"127.0.0.1:{metrics}",
            "--swim-key-file", str(key), "--shutdown-timeout", "1",
        ]  # fmt: skip
        env = {**os.environ, "POD_NAME": f"replica-{name}", "POD_NAMESPACE": "grid"}
        procs[name] = (subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE), metrics)
    lease = "grid/grid-operator-east"
    try:
        await eventually(lambda: emulator.lease_holders().get(lease), "a leader", timeout_s=30)
        leader = emulator.lease_holders()[lease].removeprefix("replica-")
        standby = "b" if leader == "a" else "a"

        async def roles() -> bool:
            lead, follow = await _readyz(procs[leader][1]), await _readyz(procs[standby][1])
            return (
                lead == (200, "ready\nrole: leader\n")
                and follow[0] == 503
                and ("role: follower" in follow[1])
            )

        await eventually(roles, "leader ready and standby unready", timeout_s=30)
        procs[leader][0].send_signal(signal.SIGSTOP)
        paused = time.monotonic()
        await eventually(
            lambda: emulator.lease_holders()[lease] == f"replica-{standby}",
            "the standby holds the Lease",
        )
        assert time.monotonic() - paused <= 2 * 2.0
        procs[leader][0].send_signal(signal.SIGCONT)
        assert await asyncio.to_thread(procs[leader][0].wait, 20) == 1
        assert b"lost" in procs[leader][0].stderr.read()  # type: ignore[union-attr]
        await eventually(lambda: _readyz(procs[standby][1]), "the standby serves", timeout_s=30)
    finally:
        for proc, _port in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
                await asyncio.to_thread(proc.wait, 20)
            if proc.stderr is not None:
                proc.stderr.close()
    replicas = [w for w in emulator.writes if w[0].startswith("grid-operator/replica-")]
    writers = {agent for agent, _verb, resource, _h in replicas if resource != "leases"}
    assert f"grid-operator/replica-{leader}" in writers  # the check below is not vacuous
    for agent, verb, resource, holders in replicas:
        if resource != "leases":
            assert agent == f"grid-operator/{holders.get(lease)}", (agent, verb, resource)
    assert emulator.lease_holders()[lease] == ""  # the standby released it on SIGTERM
