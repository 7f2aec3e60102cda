"""The SWIM bench's loopback helpers: --nodes, deadlines, batches, /proc parsing, verdicts,
and that no member process outlives the bench."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.append(str(BENCH))

from benchkit import swim_clusters as sc  # noqa: E402
from benchkit import swim_loopback as lb  # noqa: E402


def test_nodes_parse_in_order_without_repeats() -> None:
    assert lb.parse_nodes("128") == [128]
    assert lb.parse_nodes("8, 32,128,32") == [8, 32, 128]


@pytest.mark.parametrize("text", ["", "8,", "eight", "1", "0,8", "-4", "8;32"])
def test_bad_nodes_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        lb.parse_nodes(text)


def test_the_join_deadline_holds_to_32_members_then_grows_with_n() -> None:
    assert lb.join_deadline(10.0, 8) == 10.0
    assert lb.join_deadline(10.0, 32) == 10.0
    assert lb.join_deadline(10.0, 128) == 40.0
    assert lb.join_deadline(120.0, 64) == 240.0


def test_batches_cover_every_member_but_the_seed_once() -> None:
    assert sc.batches(2, 16) == [range(1, 2)]
    got = sc.batches(128, 16)
    assert [len(b) for b in got] == [16] * 7 + [15]
    assert [i for b in got for i in b] == list(range(1, 128))


def test_vmrss_is_read_in_mib() -> None:
    status = "Name:\tpython\nVmPeak:\t  900 kB\nVmRSS:\t   40960 kB\nThreads:\t1\n"
    assert sc.vmrss_mib(status) == 40.0
    assert sc.vmrss_mib("Name:\tzombie\nState:\tZ (zombie)\n") is None
    with pytest.raises(ValueError):
        sc.vmrss_mib("VmRSS:\t40 MB\n")


def test_this_process_rss_and_cpu_are_plausible() -> None:
    rss = sc.rss_mib(os.getpid())
    assert rss is not None and 5 < rss < 4096
    assert sc.cpu_seconds(os.getpid()) > 0
    busy, total = sc.host_busy_seconds()
    assert 0 <= busy <= total


def test_detection_counts_only_dead_marks_after_the_kill() -> None:
    early, late = sc.Member("a", proc=None), sc.Member("b", proc=None)  # type: ignore[arg-type]
    victim = sc.Member("v", proc=None)  # type: ignore[arg-type]
    early.dead["v"] = [5.0]  # a false mark before the kill at 10.0 ...
    late.dead["v"] = [12.0]
    late.dead["other"] = [11.0]
    assert early.dead_marks() == 1
    assert lb.failed_at(victim, [early, late], since=10.0) is None
    early.dead["v"].append(11.5)  # ... and the real one after it
    assert lb.failed_at(victim, [early, late], since=10.0) == 12.0


def test_a_mesh_converges_when_every_member_saw_every_other_and_not_before() -> None:
    names = ["a", "b", "c"]
    members = [sc.Member(name, proc=None) for name in names]  # type: ignore[arg-type]
    for k, member in enumerate(members):
        member.alive[member.name] = 0.5  # serf reports itself; that does not count
        for j, other in enumerate(names):
            if other != member.name:
                member.alive[other] = 1.0 + k + j / 10
    assert sc.converged_at(members) == 3.1  # c saw b last, at 3.1
    del members[1].alive["c"]
    assert sc.converged_at(members) is None
    members[1].alive["c2"] = 0.7  # a stranger is not c
    assert sc.converged_at(members) is None
    members[1].alive["c"] = 9.0
    assert sc.converged_at(members) == 9.0


def test_serf_events_are_read_from_its_log_lines() -> None:
    def line(text: str) -> str:
        return f"    2026/12/06 22:00:52 [INFO] {text}\n"

    assert sc.serf_event(line("serf: EventMemberJoin: site-007 127.0.0.1")) == (
        "join",
        "site-007",
    )
    assert sc.serf_event(line("serf: EventMemberFailed: site-127 127.0.0.1")) == (
        "failed",
        "site-127",
    )
    for other in (
        "agent: Received event: member-join",
        "memberlist: Suspect site-3 has failed, no acks received",
        "memberlist: Marking site-3 as failed, suspect timeout reached (0 peer confirmations)",
        "serf: EventMemberLeave: site-3 127.0.0.1",
        "serf: EventMemberJoin: ",
    ):
        assert sc.serf_event(line(other)) is None
    assert sc.serf_event("==> Serf agent running!") is None


def test_ratios_and_medians_leave_missing_figures_missing() -> None:
    grid = {"detection_s": 9.0, "bytes_per_s_per_node": 150.0, "join_convergence_s": None,
            "cpu_percent_per_node": 0.2, "rss_mib_per_node": 40.0}  # fmt: skip
    anchor = {"detection_s": 10.0, "bytes_per_s_per_node": 300.0, "join_convergence_s": 2.0,
              "cpu_percent_per_node": 0.0, "rss_mib_per_node": 16.0}  # fmt: skip
    assert lb.ratios(grid, anchor) == {"detection": 0.9, "bytes_per_s": 0.5,
        "join_convergence": None, "cpu_percent": None, "rss": 2.5}  # fmt: skip
    rows = [{"x": 1.0, "y": None}, {"x": 3.0, "y": None}, {"x": 2.0, "y": None}]
    assert lb.combine(rows) == {"x": 2.0, "y": None, "trials": rows}
    assert lb.within(0.6, 0.6) is True
    assert lb.within(0.61, 0.6) is False
    assert lb.within(None, 0.6) is None


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_kill_children_kills_what_is_left() -> None:
    async def start() -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec("sleep", "60")
        sc.CHILDREN.append(proc)
        return proc

    async def run() -> int:
        proc = await start()
        sc.kill_children()
        return await asyncio.wait_for(proc.wait(), 10)

    assert asyncio.run(run()) == -9


def test_a_serf_agent_dies_with_the_bench() -> None:
    # A stand-in bench starts a child as SerfCluster does, prints its pid and exits at once.
    script = textwrap.dedent(f"""
        import subprocess, sys
        sys.path.append({str(BENCH)!r})
        from benchkit.swim_clusters import _dies_with_parent
        child = subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL,
                                 preexec_fn=_dies_with_parent)
        print(child.pid, flush=True)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    pid = int(done.stdout)
    deadline = time.monotonic() + 10
    try:
        while not _gone(pid):
            assert time.monotonic() < deadline, "the child outlived its parent"
            time.sleep(0.02)
    finally:
        if not _gone(pid):
            os.kill(pid, 9)


def test_the_full_window_covers_one_push_pull_interval_and_quick_stays_short() -> None:
    assert lb.window_s(lb.FULL, 8) == 30.0
    assert lb.window_s(lb.FULL, 32) == 30.0
    assert lb.window_s(lb.FULL, 128) == 90.0
    assert lb.window_s(lb.QUICK, 128) == lb.QUICK.window_s
