"""CPU share of a demo mesh's processes: CPU seconds per wall second, at rest and with traffic.

``bench/operator.py`` reports each operator's share this way (Linux ``/proc``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
from pathlib import Path
from typing import Any

from grid.demo.mesh import DemoMesh
from grid.demo.plan import API_MODEL, MODEL
from grid.demo.traffic import DEFAULT_RATE, send_traffic


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of one process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _shares(pids: dict[str, int], seconds: float) -> dict[str, float]:
    before = {s: _cpu_seconds(pid) for s, pid in pids.items()}
    started = time.monotonic()
    await asyncio.sleep(seconds)
    wall = time.monotonic() - started
    return {s: round((_cpu_seconds(pid) - before[s]) / wall, 4) for s, pid in pids.items()}


async def steady_cpu(
    mesh: DemoMesh, pids: dict[str, int], warmup_s: float, measure_s: float
) -> dict[str, Any]:
    """The CPU share of each process in ``pids`` at rest, then with the demo's traffic."""
    await asyncio.sleep(warmup_s)
    idle = await _shares(pids, measure_s)
    gateways = [g for g in map(mesh.gateway_address, mesh.plan.sites) if g]
    load = asyncio.create_task(
        send_traffic(gateways, DEFAULT_RATE, (MODEL, API_MODEL), mesh.api_keys)
    )
    try:
        await asyncio.sleep(min(warmup_s, 5.0))
        traffic = await _shares(pids, measure_s)
    finally:
        load.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await load
    return {
        "warmup_s": warmup_s,
        "measure_s": measure_s,
        "traffic_rps": DEFAULT_RATE,
        "idle": idle,
        "traffic": traffic,
        "idle_mean": round(statistics.mean(idle.values()), 4),
        "traffic_mean": round(statistics.mean(traffic.values()), 4),
    }
