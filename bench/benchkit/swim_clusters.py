"""The two meshes of bench/swim.py's loopback part: Grid members and serf agents.

Each member is its own OS process: a Grid member runs `benchkit.swim_child` (a
`SwimNode` alone), a memberlist member is a ``serf agent``. Both meshes start in
batches of `BATCH` members (the first member alone, as the seed), each batch
waited for before the next, so that a 2-core machine can start 128 of them.
Every child is registered in `CHILDREN` and dies with the bench: the clusters
kill theirs on stop, `kill_children` kills whatever is left (error, Ctrl-C),
and each child also has ``PR_SET_PDEATHSIG`` set should the bench be killed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grid.core.swim.config import SwimConfig
from grid.demo.ports import PortPicker

BATCH = 16
"""Members started at once (after the first)."""
READY_DEADLINE_S = 60.0
"""How long one batch may take to start."""
CLK_TCK = os.sysconf("SC_CLK_TCK")
CHILD = Path(__file__).resolve().parent / "swim_child.py"
CHILDREN: list[asyncio.subprocess.Process] = []
"""Every process the meshes started, to be killed at the end whatever happens."""

free_port = PortPicker()
"""Distinct loopback ports free for TCP and UDP, drawn below the ephemeral range."""


def log(message: str) -> None:
    """Progress goes to stderr so the last stdout line stays the JSON summary."""
    print(message, file=sys.stderr, flush=True)


def lan_config(n: int) -> SwimConfig:
    """Grid's config at memberlist's LAN settings for an n-member mesh."""
    return SwimConfig(
        gossip_nodes=3,
        gossip_interval_s=0.2,
        suspicion_confirmations=2,
        probe_interval_s=1.0,
        probe_timeout_s=0.5,
        suspicion_timeout_s=4.0 * max(1.0, math.log10(n)),
        suspicion_max_timeout_mult=6.0,
        retransmit_mult=4,
        push_pull_interval_s=30.0,
        awareness_max_multiplier=8,
    )


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def vmrss_mib(status: str) -> float | None:
    """The resident set size in a /proc/PID/status text, in MiB (None if absent)."""
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key == "VmRSS":
            amount, unit = value.split()
            if unit != "kB":
                raise ValueError(f"VmRSS in {unit!r}")
            return int(amount) / 1024
    return None


def rss_mib(pid: int) -> float | None:
    """A process's resident set size in MiB (None once it is gone or a zombie)."""
    try:
        return vmrss_mib(Path(f"/proc/{pid}/status").read_text())
    except FileNotFoundError:
        return None


def host_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, over all cores, from /proc/stat."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()
    ticks = [int(x) for x in first[1:8]]  # user nice system idle iowait irq softirq
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / CLK_TCK, sum(ticks) / CLK_TCK


async def wait_until(condition: Callable[[], Any], deadline_s: float, what: str) -> float:
    """Poll `condition()` (returns a time or None) until it yields a time."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while True:
        found = condition()
        if found is not None:
            return float(found)
        if loop.time() > end:
            raise TimeoutError(what)
        await asyncio.sleep(0.02)


def kill_children() -> None:
    """SIGKILL every started process that has not been reaped yet."""
    for proc in CHILDREN:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)


_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _dies_with_parent() -> None:
    """preexec_fn for serf agents: SIGKILL when the bench exits (prctl resolved before fork)."""
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


async def _stop(procs: list[asyncio.subprocess.Process]) -> None:
    for proc in procs:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
    await asyncio.gather(*(p.wait() for p in procs))


@dataclass
class Member:
    """One member process and what the parent learned about it."""

    name: str
    proc: asyncio.subprocess.Process
    alive: dict[str, float] = field(default_factory=dict)
    dead: dict[str, list[float]] = field(default_factory=dict)
    ready: asyncio.Future[str] | None = None
    stats: asyncio.Future[float] | None = None
    admission: dict[str, int] = field(default_factory=dict)
    """Grid only, at the last stats: ``unanswered`` challenges and ``refused`` announcements."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def dead_after(self, member: str, since: float) -> float | None:
        """The first time at or after `since` this member marked `member` dead."""
        return next((t for t in self.dead.get(member, []) if t >= since), None)

    def dead_marks(self) -> int:
        return sum(len(times) for times in self.dead.values())


def batches(n: int, size: int) -> list[range]:
    """Member indices 1 … n-1 (0 is the seed, started alone) in start batches of `size`."""
    return [range(i, min(i + size, n)) for i in range(1, n, size)]


def converged_at(members: list[Member]) -> float | None:
    """When the last member had seen every other alive, once all have (a member's
    sight of itself, which serf reports, does not count)."""
    names = [m.name for m in members]
    times = []
    for member in members:
        seen = [member.alive.get(name) for name in names if name != member.name]
        if any(t is None for t in seen):
            return None
        times.append(max(t for t in seen if t is not None))
    return max(times) if times else None


class Mesh:
    """What both meshes share: their members, convergence, and the member to kill."""

    label = ""

    def __init__(self, n: int) -> None:
        self.n = n
        self.members: list[Member] = []

    def converged_at(self) -> float | None:
        if len(self.members) < self.n:
            return None
        return converged_at(self.members)

    def victim(self) -> Member:
        """The last member every other member knows (all of them, once converged)."""
        for member in reversed(self.members):
            if all(member.name in m.alive for m in self.members if m is not member):
                return member
        return self.members[-1]


class GridCluster(Mesh):
    """n Grid members, each its own process running `benchkit.swim_child`."""

    label = "grid"

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.key = os.urandom(32)
        self._procs: list[asyncio.subprocess.Process] = []
        self._readers: list[asyncio.Task[None]] = []
        self.config = json.dumps(dataclasses.asdict(lan_config(n)))

    async def _spawn(self, name: str, seed: str | None) -> Member:
        # -P: do not put bench/benchkit first on sys.path.
        args = [sys.executable, "-P", str(CHILD), name, self.config, *([seed] if seed else [])]
        proc = await asyncio.create_subprocess_exec(
            *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
        )
        CHILDREN.append(proc)
        self._procs.append(proc)
        assert proc.stdin is not None
        proc.stdin.write(self.key.hex().encode() + b"\n")
        member = Member(name, proc, ready=asyncio.get_running_loop().create_future())
        self._readers.append(asyncio.create_task(self._read(member)))
        return member

    async def _read(self, member: Member) -> None:
        assert member.proc.stdout is not None
        while line := await member.proc.stdout.readline():
            msg = json.loads(line)
            if "ready" in msg and member.ready is not None:
                member.ready.set_result(msg["ready"])
            elif msg.get("ev") == "alive":
                member.alive.setdefault(msg["m"], msg["t"])
            elif msg.get("ev") == "dead":
                member.dead.setdefault(msg["m"], []).append(msg["t"])
            elif "sent" in msg and member.stats is not None and not member.stats.done():
                member.admission = {k: int(msg[k]) for k in ("unanswered", "refused", "late")}
                member.stats.set_result(float(msg["sent"]))

    async def start(self) -> float:
        """Start every member, batch by batch; returns when the last one issued its join."""
        first = await self._spawn("site-000", None)
        assert first.ready is not None
        seed = await asyncio.wait_for(first.ready, READY_DEADLINE_S)
        self.members = [first]
        for batch in batches(self.n, BATCH):
            started = [await self._spawn(f"site-{i:03d}", seed) for i in batch]
            self.members += started
            ready = [m.ready for m in started if m.ready is not None]
            await asyncio.wait_for(asyncio.gather(*ready), READY_DEADLINE_S)
        return time.monotonic()

    async def bytes_sent(self) -> list[float]:
        """Each member's total bytes sent so far."""
        loop = asyncio.get_running_loop()
        for member in self.members:
            member.stats = loop.create_future()
            assert member.proc.stdin is not None
            member.proc.stdin.write(b"stats\n")
        futures = [m.stats for m in self.members if m.stats is not None]
        return list(await asyncio.wait_for(asyncio.gather(*futures), 30))

    async def stop(self) -> None:
        await _stop(self._procs)
        for reader in self._readers:
            reader.cancel()


def serf_event(line: str) -> tuple[str, str] | None:
    """``("join" | "failed", member)`` from one line of a serf agent's log, else None.

    The lines are serf's own, logged as it hands the event on (``[INFO] serf:
    EventMemberJoin: NAME ADDR``), where its ``serf.member.join`` and
    ``serf.member.failed`` counters are counted.
    """
    _, found, rest = line.partition(" serf: EventMember")
    if not found:
        return None
    kind, _, rest = rest.partition(": ")
    words = rest.split()
    if kind not in ("Join", "Failed") or not words:
        return None
    return kind.lower(), words[0]


class StatsdListener(asyncio.DatagramProtocol):
    """Sums one serf agent's statsd counters of bytes sent."""

    def __init__(self) -> None:
        self.total_sent = 0.0

    def datagram_received(self, data: bytes, addr: Any) -> None:
        for line in data.decode(errors="replace").splitlines():
            name, _, rest = line.partition(":")
            value_text, _, kind = rest.partition("|")
            if kind != "c":
                continue
            value = float(value_text)
            if name.endswith("memberlist.udp.sent") or name.endswith("memberlist.tcp.sent"):
                self.total_sent += value


def serf_binary() -> str | None:
    """The serf binary; installed with apt-get when missing and running as root."""
    found = shutil.which("serf")
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    log("serf missing: apt-get install -y serf")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "serf"]):
        done = subprocess.run(cmd, env=env, capture_output=True, check=False)
        if done.returncode != 0 and cmd[1] == "install":
            return None
    return shutil.which("serf")


class SerfCluster(Mesh):
    """n serf agents (memberlist, LAN profile): events from their logs, read as they come
    (a pipe loses nothing, where statsd over UDP dropped some under load), bytes from
    statsd."""

    label = "memberlist"

    def __init__(self, n: int, binary: str, workdir: Path) -> None:
        super().__init__(n)
        self.binary = binary
        self.workdir = workdir
        self.listeners: list[StatsdListener] = []
        self._readers: list[asyncio.Task[None]] = []
        self._procs: list[asyncio.subprocess.Process] = []
        self._transports: list[asyncio.BaseTransport] = []
        self.key = base64.b64encode(os.urandom(32)).decode()

    async def _statsd(self) -> int:
        """A statsd listener for one more agent; returns its port."""
        listener = StatsdListener()
        transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: listener, local_addr=("127.0.0.1", 0)
        )
        self.listeners.append(listener)
        self._transports.append(transport)
        return int(transport.get_extra_info("sockname")[1])

    async def _agent(self, member: Member, config: dict[str, Any]) -> asyncio.subprocess.Process:
        path = self.workdir / f"{member.name}.json"
        path.write_text(json.dumps(config))
        path.chmod(0o600)
        with (self.workdir / f"{member.name}.log").open("ab") as errors:
            proc = await asyncio.create_subprocess_exec(
                self.binary, "agent", f"-config-file={path}",
                stdout=subprocess.PIPE, stderr=errors,
                start_new_session=True, preexec_fn=_dies_with_parent,
            )  # fmt: skip
        CHILDREN.append(proc)
        self._procs.append(proc)
        self._readers.append(asyncio.create_task(self._read(member, proc)))
        return proc

    async def _read(self, member: Member, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            event = serf_event(line.decode(errors="replace"))
            if event is None:
                continue
            kind, name = event
            if kind == "join":
                member.alive.setdefault(name, time.monotonic())
            else:
                member.dead.setdefault(name, []).append(time.monotonic())

    async def _spawn(self, index: int, join: str | None) -> tuple[Member, str]:
        """Start one agent and wait until it reports itself; retry on a lost port race."""
        member = Member(f"site-{index:03d}", proc=None)  # type: ignore[arg-type]
        statsd_port = await self._statsd()
        for _attempt in range(3):
            port = free_port()
            config = {
                "node_name": member.name,
                "bind": f"127.0.0.1:{port}",
                "rpc_addr": f"127.0.0.1:{free_port()}",
                "encrypt_key": self.key,
                "profile": "lan",
                "log_level": "info",
                "statsd_addr": f"127.0.0.1:{statsd_port}",
                "start_join": [join] if join else [],
            }
            proc = member.proc = await self._agent(member, config)

            def reported(p: asyncio.subprocess.Process = proc) -> float | None:
                if member.name in member.alive or p.returncode is not None:
                    return time.monotonic()
                return None

            await wait_until(reported, READY_DEADLINE_S, "serf agent start")
            if member.name in member.alive:
                return member, f"127.0.0.1:{port}"
            await proc.wait()
        raise RuntimeError(f"serf agent {member.name} did not start; see its log")

    async def start(self) -> float:
        """Start every agent, batch by batch; returns when the last one reported itself."""
        first, seed = await self._spawn(0, None)
        self.members = [first]
        for batch in batches(self.n, BATCH):
            started = await asyncio.gather(*(self._spawn(i, seed) for i in batch))
            self.members += [member for member, _ in started]
        return time.monotonic()

    async def bytes_sent(self) -> list[float]:
        await asyncio.sleep(0.25)  # statsd flushes every 100 ms
        return [listener.total_sent for listener in self.listeners]

    async def stop(self) -> None:
        await _stop(self._procs)
        for reader in self._readers:
            reader.cancel()
        for transport in self._transports:
            transport.close()


Cluster = GridCluster | SerfCluster
