"""The workers figures of bench/gateway.py: ``grid gateway`` at 1 and 2 workers, and the
trivial forwarder at 1 and 2 processes sharing its port with ``SO_REUSEPORT``.

The targets are measured in the same interleaved rounds as the others; the ratios
are medians over rounds of figures taken back to back. On a machine with two cores
that the load generator and the mock provider also use, a second process cannot
double anything: the ratio says how much of a core the second worker found.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchkit.procs import REPO, spawn

Ratio = Callable[[dict[str, Any], str, str, str], float]


def spawn_targets(
    work: Path, upstream: str, gateway_config: Path, gateway_port: int, forwarder_port: int
) -> tuple[list[subprocess.Popen[bytes]], dict[str, str]]:
    """A 2-worker gateway and two forwarder processes on one port; children and targets."""
    py = sys.executable
    forwarder = str(REPO / "bench" / "forwarder.py")
    children = [
        spawn([py, "-m", "grid", "gateway", "--config", str(gateway_config), "--workers", "2"],
              work / "gateway-workers-2.log"),
        *(spawn([py, "-P", forwarder, str(forwarder_port), upstream],
                work / f"forwarder-2-{i}.log") for i in range(2)),
    ]  # fmt: skip
    targets = {
        "forwarder_2": f"http://127.0.0.1:{forwarder_port}/v1/chat/completions",
        "gateway_workers_2": f"http://127.0.0.1:{gateway_port}/v1/chat/completions",
    }
    return children, targets


def summary(figures: dict[str, Any], ratio: Ratio) -> dict[str, Any]:
    """The workers ratios, from the per-round figures (before they are dropped)."""
    if "gateway_workers_2" not in figures:
        return {}
    return {
        "workers_2_throughput_ratio_to_1": ratio(figures, "gateway_workers_2", "gateway", "rps"),
        "workers_2_throughput_ratio_to_forwarder_2": ratio(
            figures, "gateway_workers_2", "forwarder_2", "rps"
        ),
        "forwarder_2_throughput_ratio_to_1": ratio(figures, "forwarder_2", "forwarder", "rps"),
    }
