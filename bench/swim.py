"""SWIM benchmark: dissemination in simulation, and Grid vs. memberlist on loopback.

Part 1, simulation (`grid.testing.simulator`, virtual time, no loss): a mesh of
n members already knowing each other; one member publishes one small lane item
and we count probe rounds until every member delivered it, against ⌈log₂ n⌉
(n = 16 … 1,024; ``--quick`` stops at 256). Push-pull is off, so only
gossip spreads it (piggybacked on probes and on gossip ticks every 200 ms).

Part 2, loopback (real sockets on 127.0.0.1, encrypted, n = 8 and 32): each
Grid member is a separate Python process (this script with ``--child``) and
each memberlist member a separate ``serf agent`` process (Debian's ``serf``,
HashiCorp memberlist with its LAN profile). Both use memberlist's LAN timing:
probe interval 1 s, probe timeout 0.5 s, 3 indirect probes, gossip to 3 members
every 200 ms, suspicion multiplier 4 with K = 2 confirmations (Grid:
``suspicion_timeout_s = 4·max(1, log10 n)`` s, the same minimum memberlist
computes; maximum 6 times that in both), retransmit multiplier 4,
push-pull every 30 s. Measured for each:

- join convergence: from the moment the last member was started until every
  member lists all others alive (Grid: the members' own events, timestamped by
  them; memberlist: each agent's ``serf.member.join`` statsd counter, which
  counts itself too, timestamped on arrival, ≤ 100 ms flush delay);
- bytes/s per member: bytes sent (UDP datagrams plus TCP push-pull, sealed
  payload bytes without IP/UDP/TCP headers) over a quiet window, averaged over
  members (Grid: its transport counters; memberlist: its own
  ``memberlist.udp.sent`` and ``memberlist.tcp.sent`` statsd counters, which
  count the encrypted payload the same way);
- CPU% per member: utime + stime from ``/proc/PID/stat`` over the same window;
- failure detection: SIGKILL one member; time until every survivor marks it
  dead (Grid: the survivors' "dead" events; memberlist: ``serf.member.failed``).

Without ``--quick`` the meshes run one after the other, with a 10 s settle
after joining and a 10 s window, three trials each (figures are medians, the
trials are listed too). With ``--quick`` the Grid and memberlist
meshes of one size are joined one after the other, then measured side by side
(2 s settle, 3 s window, both victims killed together), and a join that is not
complete within 10 s is reported as ``null`` rather than waited for; one trial.

Part 3, origin signatures (no network): the cost per broadcast item of what
a site adds for origin authentication, signing its item and a receiver
verifying it (`grid.core.crdt.origin`), for an ECDSA P-256 and an Ed25519
site key, against the AES-256-GCM seal of the same bytes measured in the same
run (the cost every item already pays inside its GRID frame). The item is a
state lane of four provider records; figures are microseconds per item, the
median of several timed batches. ``--signing-only`` runs just this part.

Both meshes encrypt (Grid: AES-256-GCM GRID frames; serf: ``encrypt_key``,
memberlist's AES-GCM). The memberlist part needs ``serf``; run as root, the
bench installs it with apt-get when missing, otherwise it prints that the
anchor is skipped. The last line of output is one JSON object.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's directory comes first on sys.path, where
# bench/operator.py would shadow the standard library's `operator` module.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


import argparse  # noqa: E402
import asyncio  # noqa: E402
import base64  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from grid.core.crdt.origin import item_signature_valid, item_signing_input  # noqa: E402
from grid.core.crdt.payload import encode_lane  # noqa: E402
from grid.core.crdt.record import ProviderRecord, RecordSignals  # noqa: E402
from grid.core.crdt.snapshot import GridStateSnapshot  # noqa: E402
from grid.core.swim.config import SwimConfig  # noqa: E402
from grid.core.swim.messages import BroadcastItem, Lane  # noqa: E402
from grid.core.wire.frame import seal  # noqa: E402
from grid.demo.plan import PortPicker  # noqa: E402
from grid.testing.origin import SitePki  # noqa: E402
from grid.testing.simulator import SimNode, Simulator  # noqa: E402

DETECTION_TARGET = 1.0
BYTES_TARGET = 1.5
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    """Progress goes to stderr so the last stdout line stays the JSON summary."""
    print(message, file=sys.stderr, flush=True)


# -- part 1: dissemination in simulation -------------------------------------------


def dissemination_rounds(n: int, seed: int) -> float:
    """Probe rounds until all `n` members delivered one item published by one of them."""
    config = SwimConfig(probe_interval_s=1.0, probe_timeout_s=0.5, push_pull_interval_s=0)
    sim = Simulator(seed, config=config)
    got: set[str] = set()
    item = BroadcastItem(Lane.METADATA, "site-0000", 1, b"x" * 32)

    def on_deliver(node: SimNode, delivered: BroadcastItem) -> None:
        if delivered == item:
            got.add(node.id)

    nodes = [sim.add_node(on_deliver=on_deliver) for _ in range(n)]
    sim.bootstrap(nodes)
    sim.run_for(3.0)  # let each member's own join announcement drain
    sim.apply(nodes[0], nodes[0].machine.publish(item, sim.now))
    start = sim.now
    done = sim.run_until(lambda: len(got) == n - 1, timeout_s=120.0, check_every_s=0.02)
    if done is None:
        raise RuntimeError(f"item did not reach all {n} members (seed {seed})")
    return (done - start) / config.probe_interval_s


def simulate(sizes: list[int], seeds: int) -> list[dict[str, Any]]:
    """Median rounds per n over `seeds` runs, with the ratio to ⌈log₂ n⌉."""
    rows = []
    for n in sizes:
        runs = [dissemination_rounds(n, seed) for seed in range(1, seeds + 1)]
        rounds = statistics.median(runs)
        log2n = math.ceil(math.log2(n))
        rows.append(
            {"n": n, "rounds": round(rounds, 2), "log2_n": log2n, "ratio": round(rounds / log2n, 3)}
        )
        log(f"sim n={n:5d} rounds={rounds:6.2f} ceil(log2 n)={log2n:2d} runs={runs}")
    return rows


# -- shared pieces of the loopback part ---------------------------------------------


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


free_port = PortPicker()
"""Distinct loopback ports free for TCP and UDP, drawn below the ephemeral range."""


async def wait_until(condition: Any, deadline_s: float, what: str) -> float:
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


@dataclass
class Member:
    """One member process and what the parent learned about it."""

    name: str
    proc: asyncio.subprocess.Process
    alive: dict[str, float] = field(default_factory=dict)
    dead: dict[str, float] = field(default_factory=dict)
    joins: list[float] = field(default_factory=list)
    sent: list[tuple[float, float]] = field(default_factory=list)
    ready: asyncio.Future[str] | None = None
    stats: asyncio.Future[float] | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid


# -- Grid members: this script as a child process -------------------------------------


async def child_main(node_id: str, seed: str | None, config_json: str) -> None:
    """Run one SwimNode; report events and stats as JSON lines on stdout."""
    from grid.adapters.swim_node import SwimNode
    from grid.core.swim.effects import Notify
    from grid.core.wire.keyring import Keyring

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    key = bytes.fromhex((await reader.readline()).decode().strip())
    config = SwimConfig(**json.loads(config_json))
    seeds = [seed] if seed else []
    node = await SwimNode.start(node_id, "127.0.0.1:0", Keyring(key), config=config, seeds=seeds)

    def emit(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    emit({"ready": node.address, "t": time.monotonic()})

    async def events() -> None:
        while True:
            event = await node.events.get()
            if isinstance(event, Notify):
                emit({"ev": event.kind.value, "m": event.member, "t": time.monotonic()})

    pump = asyncio.create_task(events())
    while line := await reader.readline():
        if line.strip() == b"stats":
            emit({"sent": node.counters.bytes_sent, "t": time.monotonic()})
    pump.cancel()
    await node.stop()


class GridCluster:
    """n Grid members, each its own process running `child_main`."""

    label = "grid"

    def __init__(self, n: int) -> None:
        self.n = n
        self.members: list[Member] = []
        self.key = os.urandom(32)
        self._readers: list[asyncio.Task[None]] = []
        self.config = json.dumps(_config_dict(n))

    async def _spawn(self, name: str, seed: str | None) -> Member:
        # -P: do not put bench/ first on sys.path (a bench module could shadow the stdlib).
        args = [sys.executable, "-P", __file__, "--child", name, "--config", self.config]
        if seed:
            args += ["--seed", seed]
        proc = await asyncio.create_subprocess_exec(
            *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
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
                member.dead.setdefault(msg["m"], msg["t"])
            elif "sent" in msg and member.stats is not None:
                member.stats.set_result(float(msg["sent"]))

    async def start(self) -> float:
        """Start every member; returns the time the last one issued its join."""
        first = await self._spawn("site-00", None)
        assert first.ready is not None
        seed = await asyncio.wait_for(first.ready, 60)
        self.members = [first]
        rest = [self._spawn(f"site-{i:02d}", seed) for i in range(1, self.n)]
        self.members += await asyncio.gather(*rest)
        await asyncio.wait_for(asyncio.gather(*(m.ready for m in self.members if m.ready)), 120)
        return time.monotonic()

    def converged_at(self) -> float | None:
        """When the last member had seen every other alive, once all have."""
        times = []
        for member in self.members:
            if len(member.alive) < self.n - 1:
                return None
            times.append(sorted(member.alive.values())[self.n - 2])
        return max(times)

    async def bytes_sent(self) -> list[float]:
        """Each member's total bytes sent so far."""
        loop = asyncio.get_running_loop()
        for member in self.members:
            member.stats = loop.create_future()
            assert member.proc.stdin is not None
            member.proc.stdin.write(b"stats\n")
        return list(
            await asyncio.wait_for(asyncio.gather(*(m.stats for m in self.members if m.stats)), 30)
        )

    def victim(self) -> Member:
        """The last member every other member knows (all of them, once converged)."""
        for member in reversed(self.members):
            if all(member.name in m.alive for m in self.members if m is not member):
                return member
        return self.members[-1]

    def failed_at(self, victim: str, survivors: list[Member]) -> float | None:
        """When the last survivor marked `victim` dead, once all have."""
        times = [m.dead.get(victim) for m in survivors]
        return None if any(t is None for t in times) else max(t for t in times if t)

    async def stop(self) -> None:
        for member in self.members:
            with contextlib.suppress(ProcessLookupError):
                member.proc.kill()
        await asyncio.gather(*(m.proc.wait() for m in self.members))


def _config_dict(n: int) -> dict[str, Any]:
    return dataclasses.asdict(lan_config(n))


# -- memberlist members: serf agents ---------------------------------------------------


class StatsdListener(asyncio.DatagramProtocol):
    """Receives one serf agent's statsd counters and timestamps them on arrival."""

    def __init__(self, member: Member) -> None:
        self.member = member
        self.total_sent = 0.0

    def datagram_received(self, data: bytes, addr: Any) -> None:
        now = time.monotonic()
        for line in data.decode(errors="replace").splitlines():
            name, _, rest = line.partition(":")
            value_text, _, kind = rest.partition("|")
            if kind != "c":
                continue
            value = float(value_text)
            if name.endswith("memberlist.udp.sent") or name.endswith("memberlist.tcp.sent"):
                self.total_sent += value
                self.member.sent.append((now, self.total_sent))
            elif name.endswith("serf.member.join"):
                self.member.joins.append(now)
            elif name.endswith("serf.member.failed"):
                self.member.dead.setdefault("*", now)


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


class SerfCluster:
    """n serf agents (memberlist, LAN profile), each reporting to its own statsd listener."""

    label = "memberlist"

    def __init__(self, n: int, binary: str, workdir: Path) -> None:
        self.n = n
        self.binary = binary
        self.workdir = workdir
        self.members: list[Member] = []
        self.listeners: list[StatsdListener] = []
        self._transports: list[asyncio.BaseTransport] = []
        self.key = base64.b64encode(os.urandom(32)).decode()

    async def _spawn(self, index: int, join: str | None) -> tuple[Member, str]:
        """Start one agent and wait until it reports itself; retry on a lost port race."""
        loop = asyncio.get_running_loop()
        name = f"site-{index:02d}"
        member = Member(name, proc=None)  # type: ignore[arg-type]
        listener = StatsdListener(member)
        transport, _ = await loop.create_datagram_endpoint(
            lambda: listener, local_addr=("127.0.0.1", 0)
        )
        self.listeners.append(listener)
        self._transports.append(transport)
        statsd_port = transport.get_extra_info("sockname")[1]
        for _attempt in range(3):
            port = free_port()
            config = {
                "node_name": name,
                "bind": f"127.0.0.1:{port}",
                "rpc_addr": f"127.0.0.1:{free_port()}",
                "encrypt_key": self.key,
                "profile": "lan",
                "log_level": "err",
                "statsd_addr": f"127.0.0.1:{statsd_port}",
                "start_join": [join] if join else [],
            }
            path = self.workdir / f"{name}.json"
            path.write_text(json.dumps(config))
            path.chmod(0o600)
            with (self.workdir / f"{name}.log").open("ab") as errors:
                proc = await asyncio.create_subprocess_exec(
                    self.binary,
                    "agent",
                    f"-config-file={path}",
                    stdout=subprocess.DEVNULL,
                    stderr=errors,
                )
            member.proc = proc
            await wait_until(
                lambda p=proc: (
                    time.monotonic() if member.joins or p.returncode is not None else None
                ),
                30,
                "serf agent start",
            )
            if member.joins:
                return member, f"127.0.0.1:{port}"
            await proc.wait()
        raise RuntimeError(f"serf agent {name} did not start; see its log")

    async def start(self) -> float:
        first, seed = await self._spawn(0, None)
        self.members = [first]
        for i in range(1, self.n):
            member, _ = await self._spawn(i, seed)
            self.members.append(member)
        return time.monotonic()

    def converged_at(self) -> float | None:
        times = []
        for member in self.members:
            if len(member.joins) < self.n:
                return None
            times.append(member.joins[self.n - 1])
        return max(times)

    async def bytes_sent(self) -> list[float]:
        await asyncio.sleep(0.25)  # statsd flushes every 100 ms
        return [listener.total_sent for listener in self.listeners]

    def victim(self) -> Member:
        """The last member started."""
        return self.members[-1]

    def failed_at(self, victim: str, survivors: list[Member]) -> float | None:
        times = [m.dead.get("*") for m in survivors]
        return None if any(t is None for t in times) else max(t for t in times if t)

    async def stop(self) -> None:
        for member in self.members:
            with contextlib.suppress(ProcessLookupError):
                member.proc.kill()
        await asyncio.gather(*(m.proc.wait() for m in self.members))
        for transport in self._transports:
            transport.close()


# -- the loopback measurement, identical for both ------------------------------------


Cluster = GridCluster | SerfCluster


async def join_phase(cluster: Cluster, deadline_s: float) -> float | None:
    """Start the mesh; seconds from the last member's start to full membership.

    None when membership was not complete within `deadline_s` (reported as such).
    """
    started = await cluster.start()
    try:
        joined = await wait_until(cluster.converged_at, deadline_s, f"{cluster.label} join")
    except TimeoutError:
        log(f"{cluster.label} n={cluster.n}: membership incomplete after {deadline_s:.0f} s")
        return None
    return max(0.0, joined - started)


async def quiet_window(clusters: list[Cluster], window_s: float) -> list[tuple[float, float]]:
    """Mean bytes/s sent and CPU fraction per member of each mesh over one window."""
    sent_before = [await c.bytes_sent() for c in clusters]
    cpu_before = [[cpu_seconds(m.pid) for m in c.members] for c in clusters]
    t0 = time.monotonic()
    await asyncio.sleep(window_s)  # a fixed measurement window, not a wait for a condition
    sent_after = [await c.bytes_sent() for c in clusters]
    cpu_after = [[cpu_seconds(m.pid) for m in c.members] for c in clusters]
    elapsed = time.monotonic() - t0
    out = []
    for k in range(len(clusters)):
        sent = zip(sent_before[k], sent_after[k], strict=True)
        cpu = zip(cpu_before[k], cpu_after[k], strict=True)
        out.append(
            (
                statistics.mean(b - a for a, b in sent) / elapsed,
                statistics.mean(b - a for a, b in cpu) / elapsed,
            )
        )
    return out


async def detection_phase(cluster: Cluster) -> float:
    """SIGKILL the last member; seconds until every survivor marked it dead."""
    victim = cluster.victim()
    survivors = [m for m in cluster.members if m is not victim]
    killed = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    detected = await wait_until(
        lambda: cluster.failed_at(victim.name, survivors), 180, f"{cluster.label} detection"
    )
    return detected - killed


async def measure(
    clusters: list[Cluster], settle_s: float, window_s: float, join_deadline_s: float
) -> list[dict[str, Any]]:
    """Join each mesh in turn, then measure them side by side (window, then kills)."""
    try:
        joins = [await join_phase(cluster, join_deadline_s) for cluster in clusters]
        await asyncio.sleep(settle_s)  # let the join gossip drain before the quiet window
        usage = await quiet_window(clusters, window_s)
        detections = await asyncio.gather(*(detection_phase(c) for c in clusters))
    finally:
        for cluster in clusters:
            await cluster.stop()
    results = []
    for cluster, join_s, (bps, cpu), detect_s in zip(
        clusters, joins, usage, detections, strict=True
    ):
        result = {
            "join_convergence_s": None if join_s is None else round(join_s, 3),
            "bytes_per_s_per_node": round(bps, 1),
            "cpu_percent_per_node": round(100 * cpu, 3),
            "detection_s": round(detect_s, 3),
        }
        log(f"{cluster.label:10s} n={cluster.n:3d} {result}")
        results.append(result)
    return results


def ratios(grid: dict[str, Any], anchor: dict[str, Any]) -> dict[str, float | None]:
    def ratio(key: str) -> float | None:
        if grid[key] is None or not anchor[key]:
            return None
        return round(float(grid[key]) / float(anchor[key]), 3)

    return {
        "detection": ratio("detection_s"),
        "bytes_per_s": ratio("bytes_per_s_per_node"),
        "join_convergence": ratio("join_convergence_s"),
        "cpu_percent": ratio("cpu_percent_per_node"),
    }


@dataclass(frozen=True)
class Plan:
    """How the loopback part runs (``--quick`` or full)."""

    settle_s: float
    window_s: float
    join_deadline_s: float
    side_by_side: bool
    trials: int


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
    args = (plan.settle_s, plan.window_s, plan.join_deadline_s)
    grid_rows: list[dict[str, Any]] = []
    serf_rows: list[dict[str, Any]] = []
    for _ in range(plan.trials):
        if binary is None:
            grid_rows += await measure([GridCluster(n)], *args)
        elif plan.side_by_side:
            grid_row, serf_row = await measure([GridCluster(n), SerfCluster(n, binary, tmp)], *args)
            grid_rows.append(grid_row)
            serf_rows.append(serf_row)
        else:
            grid_rows += await measure([GridCluster(n)], *args)
            serf_rows += await measure([SerfCluster(n, binary, tmp)], *args)
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


def _within(ratio: float | None, target: float) -> bool | None:
    return None if ratio is None else ratio <= target


def serf_version(binary: str) -> str:
    done = subprocess.run([binary, "version"], capture_output=True, text=True, check=False)
    return done.stdout.splitlines()[0].strip() if done.stdout else "unknown"


# -- part 3: origin signatures ------------------------------------------------------


def _state_item() -> BroadcastItem:
    snap = GridStateSnapshot.empty("west")
    for i in range(4):
        record = ProviderRecord(
            name=f"vllm-{i}", cluster=f"vllm-{i}", site="west", backend_kind="local",
            models=("llama-3.1-8b-instruct",), healthy=True, observed_at=1.7e9,
            signals=RecordSignals(queue_depth=0.25, kv_cache_utilization=0.5),
        )  # fmt: skip
        snap = snap.put_provider(f"vllm-{i}", record)
    return BroadcastItem(Lane.STATE, "west", snap.revision(Lane.STATE), encode_lane(snap.state))


def _per_item_us(step: Any, batches: int, per_batch: int) -> float:
    times = []
    for _ in range(batches):
        began = time.perf_counter()
        for _ in range(per_batch):
            step()
        times.append((time.perf_counter() - began) / per_batch * 1e6)
    return round(statistics.median(times), 2)


def signing_cost(quick: bool) -> dict[str, Any]:
    """Sign and verify one state item per key kind, against an AES-GCM seal of its bytes."""
    item = _state_item()
    data = item_signing_input(item)
    key = os.urandom(32)
    batches, per_batch = (5, 100) if quick else (9, 1000)
    rows: dict[str, Any] = {}
    seal_us = _per_item_us(lambda: seal(key, data), batches, per_batch)
    for kind in ("ec-p256", "ed25519"):
        signer = SitePki.create(["west"], key_kind=kind).signer("west")  # type: ignore[arg-type]
        signed = signer.sign_item(item)
        public = signer.public_key
        assert item_signature_valid(public, signed)
        sign_us = _per_item_us(lambda s=signer: s.sign_item(item), batches, per_batch)
        verify_us = _per_item_us(
            lambda p=public, i=signed: item_signature_valid(p, i), batches, per_batch
        )
        rows[kind] = {
            "sign_us": sign_us,
            "verify_us": verify_us,
            "sign_verify_us": round(sign_us + verify_us, 2),
            "signature_bytes": len(signed.signature),
            "ratio_to_seal": round((sign_us + verify_us) / seal_us, 1),
        }
    return {"item_payload_bytes": len(item.payload), "aes_gcm_seal_us": seal_us, **rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="finish in under 60 s")
    parser.add_argument(
        "--signing-only", action="store_true", help="run only part 3 (origin signatures)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--seed", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child_main(args.child, args.seed, args.config))
        return
    began = time.monotonic()
    signing = signing_cost(args.quick)
    log(f"origin signatures: {json.dumps(signing)}")
    if args.signing_only:
        print(json.dumps({"bench": "swim", "quick": args.quick, "signing": signing}))
        return
    sizes = [16, 32, 64, 128, 256] if args.quick else [16, 32, 64, 128, 256, 512, 1024]
    sim = simulate(sizes, seeds=1 if args.quick else 3)
    log(f"simulation done in {time.monotonic() - began:.1f} s")
    binary = serf_binary()
    if binary is None:
        log("serf is not installed and could not be installed: skipping the memberlist anchor")
    if args.quick:
        plan = Plan(settle_s=2.0, window_s=3.0, join_deadline_s=10.0, side_by_side=True, trials=1)
    else:
        plan = Plan(
            settle_s=10.0, window_s=10.0, join_deadline_s=120.0, side_by_side=False, trials=3
        )
    loop_rows = asyncio.run(loopback([8, 32], binary, plan))
    summary: dict[str, Any] = {
        "bench": "swim",
        "quick": args.quick,
        "dissemination": sim,
        "loopback": loop_rows,
        "signing": signing,
        "anchor": serf_version(binary) if binary else None,
        "method": {
            "processes": "one OS process per member (Grid: python child; memberlist: serf agent)",
            "bytes": "sealed UDP+TCP payload bytes sent; Grid transport counters, "
            "memberlist udp.sent/tcp.sent statsd counters",
            "cpu": "/proc/PID/stat utime+stime over the quiet window",
            **dataclasses.asdict(plan),
            "figures": "median over trials",
        },
        "targets": {"detection_ratio_max": DETECTION_TARGET, "bytes_ratio_max": BYTES_TARGET},
        "elapsed_s": round(time.monotonic() - began, 1),
    }
    if binary is not None:
        summary["met"] = {
            n: {
                "detection": _within(row["ratios"]["detection"], DETECTION_TARGET),
                "bytes": _within(row["ratios"]["bytes_per_s"], BYTES_TARGET),
            }
            for n, row in loop_rows.items()
        }
    print(json.dumps(summary))


if __name__ == "__main__":
    random.seed()
    main()
