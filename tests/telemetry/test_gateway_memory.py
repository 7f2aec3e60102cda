"""Memory per idle connection of a gateway process, and its return after they close.

A `grid telemetry-gateway` process (embedded backbone) gets 1,000 idle TLS
connections (handshake done, no request). Its RSS, read from /proc, may grow by
at most 64 KB per connection, and must come back within 10 % of the baseline
once they close. The process runs with ``PYTHONMALLOC=malloc``, as docs/telemetry.md
tells operators to, so freed Python objects can be handed back to the OS too.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import ssl
import sys
from pathlib import Path

import pytest

from .conftest import Pki

IDLE_CONNECTIONS = 1000
PER_CONNECTION_BYTES_MAX = 64 * 1000
RETURN_TOLERANCE = 0.10


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def _connect(port: int, pki: Pki, count: int) -> list[asyncio.StreamWriter]:
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(*pki.agents["cn"])
    writers = []
    for _ in range(count):
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="localhost"
        )
        writers.append(writer)
    return writers


def _close(writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        writer.transport.abort()


async def _settled(pid: int, bound: float, limit_s: float = 10.0) -> int:
    """RSS once it is at most ``bound`` (polled), or the last reading at the deadline."""
    deadline = asyncio.get_running_loop().time() + limit_s
    rss = _rss_bytes(pid)
    while rss > bound and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
        rss = _rss_bytes(pid)
    return rss


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
async def test_idle_connections_cost_little_and_their_memory_comes_back(
    pki: Pki, tmp_path: Path
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    args = [sys.executable, "-m", "grid", "telemetry-gateway", "--listen", "127.0.0.1:0"]
    args += ["--cert", str(pki.server_cert), "--key", str(pki.server_key)]
    args += ["--client-ca", str(pki.ca), "--data-dir", str(tmp_path / "data")]
    args += ["--header-read-timeout-s", "60", "--connections-max", "2000"]
    env = {**os.environ, "PYTHONMALLOC": "malloc"}
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        port = int(json.loads(line)["listening"].rpartition(":")[2])
        _close(
            await _connect(port, pki, 20)
        )  # first-use allocations (TLS, parser) are not per connection
        baseline = await _settled(proc.pid, 0, limit_s=1.5)
        writers = await _connect(port, pki, IDLE_CONNECTIONS)
        during = _rss_bytes(proc.pid)
        _close(writers)
        after = await _settled(proc.pid, baseline * (1 + RETURN_TOLERANCE))
    finally:
        proc.terminate()
        await proc.wait()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    per_connection = (during - baseline) / IDLE_CONNECTIONS
    figures = f"baseline {baseline}, during {during}, after {after}, {per_connection:.0f} B each"
    assert per_connection <= PER_CONNECTION_BYTES_MAX, figures
    assert after <= baseline * (1 + RETURN_TOLERANCE), figures
