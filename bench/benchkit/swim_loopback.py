"""bench/swim.py's loopback part: Grid and memberlist meshes measured the same way.

For each size n, each mesh is joined (`join_phase`), left quiet for a window
(`quiet_window`: bytes/s, CPU% and RSS per member, and the machine's own CPU
use; in the full run at least one push-pull interval long, `window_s`), then
one member is SIGKILLed (`detection_phase`). A join that is not complete
within the plan's deadline (scaled to n, `join_deadline`) and a detection that
does not complete within `DETECTION_DEADLINE_S` are reported as ``None``
rather than waited for.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchkit.swim_clusters import (
    Cluster,
    GridCluster,
    Member,
    SerfCluster,
    cpu_seconds,
    host_busy_seconds,
    lan_config,
    log,
    rss_mib,
    wait_until,
)

DEFAULT_NODES = (8, 32)
DETECTION_DEADLINE_S = 180.0
JOIN_DEADLINE_REFERENCE_N = 32
"""The join deadline of a plan holds up to this size and grows in proportion beyond it."""


def parse_nodes(text: str) -> list[int]:
    """``--nodes 8,32,128``: distinct mesh sizes of at least 2, in the order given."""
    sizes: list[int] = []
    for part in text.split(","):
        try:
            n = int(part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a mesh size: {part.strip()!r}") from None
        if n < 2:
            raise argparse.ArgumentTypeError(f"a mesh needs at least 2 members, not {n}")
        if n not in sizes:
            sizes.append(n)
    return sizes


def join_deadline(base_s: float, n: int) -> float:
    """The plan's join deadline, held up to 32 members and proportional to n beyond."""
    return base_s * max(1.0, n / JOIN_DEADLINE_REFERENCE_N)


@dataclass(frozen=True)
class Plan:
    """How the loopback part runs (``--quick`` or full)."""

    settle_s: float
    window_s: float
    join_deadline_s: float
    side_by_side: bool
    trials: int
    window_covers_push_pull: bool
    """Stretch the window to one periodic push-pull interval at n (30 s up to 32
    members, 90 s at 128: memberlist's scaling, which Grid shares), so that the
    bytes/s include the anti-entropy each member does about once per interval."""


QUICK = Plan(
    settle_s=2.0, window_s=3.0, join_deadline_s=10.0, side_by_side=True, trials=1,
    window_covers_push_pull=False,
)  # fmt: skip
FULL = Plan(
    settle_s=10.0, window_s=10.0, join_deadline_s=120.0, side_by_side=False, trials=3,
    window_covers_push_pull=True,
)  # fmt: skip


def window_s(plan: Plan, n: int) -> float:
    """The quiet window at n members: the plan's, or one push-pull interval if longer."""
    if not plan.window_covers_push_pull:
        return plan.window_s
    return max(plan.window_s, lan_config(n).push_pull_interval(n))


async def join_phase(cluster: Cluster, deadline_s: float) -> float | None:
    """Start the mesh; seconds from the last member's start to full membership.

    None when membership was not complete within `deadline_s` (reported as such).
    """
    began = time.monotonic()
    started = await cluster.start()
    log(f"{cluster.label} n={cluster.n}: started in {started - began:.1f} s")
    try:
        joined = await wait_until(cluster.converged_at, deadline_s, f"{cluster.label} join")
    except TimeoutError:
        log(f"{cluster.label} n={cluster.n}: membership incomplete after {deadline_s:.0f} s")
        return None
    return max(0.0, joined - started)


@dataclass(frozen=True)
class Usage:
    """One mesh over one quiet window: means per member, and the machine's busy share."""

    bytes_per_s: float
    cpu_fraction: float
    rss_mib: float | None
    host_busy_percent: float
    admission: dict[str, int]
    """Grid only: challenged members dropped unanswered and announcements refused, summed."""


def _mean_rss(members: list[Member]) -> float | None:
    sizes = [s for s in (rss_mib(m.pid) for m in members) if s is not None]
    return statistics.mean(sizes) if sizes else None


def _admission(members: list[Member]) -> dict[str, int]:
    if not all(m.admission for m in members):
        return {}
    return {
        "unanswered_challenges": sum(m.admission["unanswered"] for m in members),
        "refused_announcements": sum(m.admission["refused"] for m in members),
        "late_answers": sum(m.admission["late"] for m in members),
    }


async def quiet_window(clusters: list[Cluster], window_s: float) -> list[Usage]:
    """Mean bytes/s sent, CPU fraction and RSS per member of each mesh over one window."""
    sent_before = [await c.bytes_sent() for c in clusters]
    cpu_before = [[cpu_seconds(m.pid) for m in c.members] for c in clusters]
    host_before = host_busy_seconds()
    t0 = time.monotonic()
    await asyncio.sleep(window_s)  # a fixed measurement window, not a wait for a condition
    sent_after = [await c.bytes_sent() for c in clusters]
    cpu_after = [[cpu_seconds(m.pid) for m in c.members] for c in clusters]
    host_after = host_busy_seconds()
    elapsed = time.monotonic() - t0
    busy = host_after[0] - host_before[0]
    total = host_after[1] - host_before[1]
    host_percent = 100 * busy / total if total > 0 else 0.0
    out = []
    for k, cluster in enumerate(clusters):
        sent = zip(sent_before[k], sent_after[k], strict=True)
        cpu = zip(cpu_before[k], cpu_after[k], strict=True)
        out.append(
            Usage(
                bytes_per_s=statistics.mean(b - a for a, b in sent) / elapsed,
                cpu_fraction=statistics.mean(b - a for a, b in cpu) / elapsed,
                rss_mib=_mean_rss(cluster.members),
                host_busy_percent=host_percent,
                admission=_admission(cluster.members),
            )
        )
    return out


def failed_at(victim: Member, survivors: list[Member], since: float) -> float | None:
    """When the last survivor marked `victim` dead after `since`, once all have."""
    times = [m.dead_after(victim.name, since) for m in survivors]
    return None if any(t is None for t in times) else max(t for t in times if t is not None)


async def detection_phase(cluster: Cluster) -> tuple[float | None, int]:
    """SIGKILL one member; seconds until every survivor marked it dead (None: not within
    `DETECTION_DEADLINE_S`), and the dead marks the mesh made before the kill."""
    victim = cluster.victim()
    survivors = [m for m in cluster.members if m is not victim]
    false_marks = sum(m.dead_marks() for m in cluster.members)
    killed = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    try:
        detected = await wait_until(
            lambda: failed_at(victim, survivors, killed),
            DETECTION_DEADLINE_S,
            f"{cluster.label} detection",
        )
    except TimeoutError:
        log(f"{cluster.label} n={cluster.n}: not every survivor marked the victim dead")
        return None, false_marks
    return detected - killed, false_marks


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


async def measure(clusters: list[Cluster], plan: Plan) -> list[dict[str, Any]]:
    """Join each mesh in turn, then measure them side by side (window, then kills)."""
    try:
        joins = [
            await join_phase(cluster, join_deadline(plan.join_deadline_s, cluster.n))
            for cluster in clusters
        ]
        await asyncio.sleep(plan.settle_s)  # let the join gossip drain before the window
        usage = await quiet_window(clusters, window_s(plan, clusters[0].n))
        detections = await asyncio.gather(*(detection_phase(c) for c in clusters))
    finally:
        for cluster in clusters:
            await cluster.stop()
    results = []
    for cluster, join_s, use, (detect_s, false_marks) in zip(
        clusters, joins, usage, detections, strict=True
    ):
        result = {
            "join_convergence_s": _rounded(join_s, 3),
            "bytes_per_s_per_node": round(use.bytes_per_s, 1),
            "cpu_percent_per_node": round(100 * use.cpu_fraction, 3),
            "detection_s": _rounded(detect_s, 3),
            "rss_mib_per_node": _rounded(use.rss_mib, 1),
            "host_cpu_busy_percent": round(use.host_busy_percent, 1),
            "false_dead_marks": false_marks,
            **use.admission,
        }
        log(f"{cluster.label:10s} n={cluster.n:3d} {result}")
        results.append(result)
    return results


def ratios(grid: dict[str, Any], anchor: dict[str, Any]) -> dict[str, float | None]:
    """Grid's figure over memberlist's, per figure (None when either is missing or zero)."""

    def ratio(key: str) -> float | None:
        if grid.get(key) is None or not anchor.get(key):
            return None
        return round(float(grid[key]) / float(anchor[key]), 3)

    return {
        "detection": ratio("detection_s"),
        "bytes_per_s": ratio("bytes_per_s_per_node"),
        "join_convergence": ratio("join_convergence_s"),
        "cpu_percent": ratio("cpu_percent_per_node"),
        "rss": ratio("rss_mib_per_node"),
    }


def combine(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each figure over trials (None when no trial produced it)."""
    out: dict[str, Any] = {}
    for key in rows[0]:
        values = [row[key] for row in rows if row[key] is not None]
        out[key] = round(statistics.median(values), 3) if values else None
    if len(rows) > 1:
        out["trials"] = rows
    return out


async def one_size(n: int, binary: str | None, tmp: Path, plan: Plan) -> dict[str, Any]:
    """Grid and (when available) memberlist at one size, `plan.trials` times."""
    grid_rows: list[dict[str, Any]] = []
    serf_rows: list[dict[str, Any]] = []
    for _ in range(plan.trials):
        if binary is None:
            grid_rows += await measure([GridCluster(n)], plan)
        elif plan.side_by_side:
            grid_row, serf_row = await measure([GridCluster(n), SerfCluster(n, binary, tmp)], plan)
            grid_rows.append(grid_row)
            serf_rows.append(serf_row)
        else:
            grid_rows += await measure([GridCluster(n)], plan)
            serf_rows += await measure([SerfCluster(n, binary, tmp)], plan)
    row: dict[str, Any] = {"grid": combine(grid_rows)}
    if serf_rows:
        row["memberlist"] = combine(serf_rows)
        row["ratios"] = ratios(row["grid"], row["memberlist"])
    return row


async def loopback(sizes: list[int], binary: str | None, plan: Plan) -> dict[str, Any]:
    """Every size in turn; with `plan.side_by_side` (``--quick``) the two meshes of
    one size are joined one after the other and then measured together."""
    with tempfile.TemporaryDirectory(prefix="grid-bench-serf-") as tmp:
        return {str(n): await one_size(n, binary, Path(tmp), plan) for n in sizes}


def within(ratio: float | None, target: float) -> bool | None:
    return None if ratio is None else ratio <= target


def serf_version(binary: str) -> str:
    done = subprocess.run([binary, "version"], capture_output=True, text=True, check=False)
    return done.stdout.splitlines()[0].strip() if done.stdout else "unknown"
