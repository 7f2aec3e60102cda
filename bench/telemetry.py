"""Telemetry gateway throughput and ACK latency per backbone, against raw writes of the same bytes.

For each backbone (embedded SQLite, NATS JetStream) it starts ``grid
telemetry-gateway`` as a process on 127.0.0.1 and drives it over real mTLS with
8 agents (``--agents``), each posting distinct 1,000-event batches back to back. It reports
acknowledged events/s, p50/p99 ACK latency, and the gateway process's CPU time
(events per CPU-second is the "per core" figure). It then reads back the exact
stamped batches the gateway stored (one blob per batch: the stamped
``EventBatch``) and writes the same blobs straight to the same kind of backbone,
in the same run, with the same durability:

- SQLite: a fresh file in WAL mode with ``synchronous=FULL``; one ``INSERT`` of
  the blob per batch in autocommit mode (one transaction, one WAL fsync per
  batch), from one thread, back to back. The gateway writes the same blob plus
  its batch ID (unique index), route and record count, one row per batch, and
  ACKs only after the row's commit (batches that waited for a commit share the
  next one: group commit).
- JetStream: the same blob as one message per batch, PubAck awaited, as many
  concurrent publishers as agents.

The raw write runs three times and its median counts, because fsync latency on
a shared disk varies from run to run.

The ratio gateway/raw says how much of the backbone's own rate the admission
pipeline keeps. Targets: >= 50% of raw SQLite, >= 100k events/s per core with
SQLite. The machine's load average is printed too: on a shared machine the
gateway gets only part of a core, so wall-clock rates understate it and events
per gateway CPU-second is the steadier figure. ``--profile`` runs the SQLite
gateway under cProfile and prints where its time goes. ``--gateways N`` runs N
independent gateway processes side by side, each with its own agents and data
directory: the ceiling any multi-process gateway could reach on this machine,
since they share no state and hand nothing to each other. The last line of
output is one JSON object.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's directory comes first on sys.path, where
# bench/operator.py would shadow the standard library's `operator`: drop it first.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import pstats  # noqa: E402
import signal  # noqa: E402
import sqlite3  # noqa: E402
import ssl  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import deque  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import aiohttp  # noqa: E402

from grid.adapters.backbone import RosterEntry  # noqa: E402
from grid.adapters.backbone.jetstream import JetStreamBackbone  # noqa: E402
from grid.adapters.backbone.sqlite import SqliteBackbone  # noqa: E402
from grid.core.telemetry.admission import Admission  # noqa: E402
from grid.core.telemetry.settings import GatewaySettings  # noqa: E402
from grid.core.telemetry.stamping import ReceptionStamp  # noqa: E402
from grid.demo.pki import DevCA  # noqa: E402
from grid.proto_gen.grid.telemetry.v1 import telemetry_pb2 as pb  # noqa: E402
from grid.telemetry.backbones import open_backbone, open_roster  # noqa: E402
from grid.testing.nats_server import NatsServer  # noqa: E402

BATCH_EVENTS = 1000
COMPARED = {
    "gateway": (
        "grid telemetry-gateway process, --agents agents over mTLS posting distinct 1,000-event "
        "EventBatch bodies back to back; counted on each 200 Ack. Per batch the gateway "
        "decodes, validates, stamps and encodes the batch once, then stores it as one row "
        "(batch_id unique, route, count, stamped blob) in SQLite (WAL, synchronous=FULL; a lone "
        "batch is one autocommit INSERT, batches that wait for a commit share the next one) or "
        "as one JetStream message with the PubAck awaited, before the Ack"
    ),
    "raw_sqlite": (
        "the same stamped blobs read back from the gateway's store, written to a fresh SQLite "
        "file (WAL, synchronous=FULL) as one autocommit INSERT per batch (one transaction and "
        "one WAL fsync per batch) from one thread, back to back; median of 3 runs"
    ),
    "raw_nats": (
        "the same stamped blobs published to a fresh JetStream file stream, one message per "
        "batch with the PubAck awaited, as many concurrent publishers as agents; median of 3 runs"
    ),
}
SQLITE_RATIO_TARGET = 0.5
SQLITE_PER_CORE_TARGET = 100_000
RAW_REPEATS = 3
"""Raw baseline runs per backbone; the median is used (fsync latency is noisy)."""
AGENTS = 8
"""Default agents per gateway: enough to keep the gateway busy. With 4, each waiting for
its ACK before posting again, the gateway's event loop thread was idle about a third of
the time, so events/s measured the round trip rather than the gateway's capacity."""
WARMUP_BATCHES = 5
CLK_TCK = os.sysconf("SC_CLK_TCK")
PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class Pki:
    """Files of the bench's dev PKI."""

    ca: Path
    cert: Path
    key: Path
    agents: list[tuple[str, Path, Path]]


def make_pki(directory: Path, agents: int) -> Pki:
    """A CA, a gateway certificate and ``agents`` agent certificates."""
    ca = DevCA()
    (directory / "ca.pem").write_bytes(ca.cert_pem)
    issued = {"gateway": ca.issue("gateway")} | {
        f"agent-{i}": ca.issue(f"agent-{i}") for i in range(agents)
    }
    for name, item in issued.items():
        (directory / f"{name}.pem").write_bytes(item.cert_pem)
        (directory / f"{name}-key.pem").write_bytes(item.key_pem)
    rows = [
        (f"agent-{i}", directory / f"agent-{i}.pem", directory / f"agent-{i}-key.pem")
        for i in range(agents)
    ]
    return Pki(directory / "ca.pem", directory / "gateway.pem", directory / "gateway-key.pem", rows)


class Bodies:
    """Distinct 1,000-event batch bodies, cheaply: one unique event plus 999 fixed ones.

    Protobuf concatenation merges repeated fields, so the body is the framed unique
    event followed by the pre-serialized rest; each body differs, so each gets its
    own content-derived batch ID and nothing is de-duplicated away.
    """

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.count = 0
        self.observed = dt.datetime.now(dt.UTC)
        rest = pb.EventBatch()
        for i in range(1, BATCH_EVENTS):
            rest.events.append(self._event(f"{agent}-fixed-{i}"))
        self.fixed = rest.SerializeToString()

    def _event(self, record_id: str) -> pb.Event:
        event = pb.Event(record_id=record_id, type="gpu.utilization", payload=b"u" * 48)
        event.observed_at.FromDatetime(self.observed)
        event.attributes.update({"gpu": "0", "host": "node-17"})
        return event

    def next(self) -> bytes:
        """The next distinct body."""
        self.count += 1
        head = pb.EventBatch(protocol_version=1, schema_version=1)
        head.events.append(self._event(f"{self.agent}-{self.count}"))
        return head.SerializeToString() + self.fixed


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


async def start_gateway(
    pki: Pki, data_dir: Path, backbone: str, profile_to: Path | None
) -> tuple[asyncio.subprocess.Process, str]:
    """Start the gateway process; return it and its HOST:PORT once it is ready."""
    prefix = [sys.executable]
    if profile_to is not None:
        prefix += ["-m", "cProfile", "-o", str(profile_to)]
    args = [*prefix, "-m", "grid", "telemetry-gateway", "--listen", "127.0.0.1:0"]
    args += ["--cert", str(pki.cert), "--key", str(pki.key), "--client-ca", str(pki.ca)]
    args += ["--data-dir", str(data_dir), "--backbone", backbone, "--gateway-id", "bench"]
    args += ["--rate-per-agent-rps", "1000000", "--burst-per-agent", "1000000"]
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    return proc, json.loads(line)["listening"]


async def stop_gateway(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM and wait (the gateway, and cProfile, exit cleanly on it)."""
    proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(proc.wait(), 30)


async def agent_load(
    pki: Pki, index: int, address: str, until: float, latencies: list[float]
) -> int:
    """Post batches back to back until ``until``; the number of acknowledged events."""
    _, cert, key = pki.agents[index]
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(cert), str(key))
    bodies = Bodies(pki.agents[index][0])
    acked = 0
    connector = aiohttp.TCPConnector(ssl=context, limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        while time.monotonic() < until:
            body = bodies.next()
            started = time.perf_counter()
            async with session.post(
                f"https://{address}/v1/events", data=body, headers={"Content-Type": PROTOBUF}
            ) as response:
                raw = await response.read()
            if response.status != 200:
                raise RuntimeError(f"gateway refused: {pb.Refusal.FromString(raw).code}")
            latencies.append(time.perf_counter() - started)
            acked += pb.Ack.FromString(raw).accepted
    return acked


@dataclass(frozen=True)
class StoredBatch:
    """One batch exactly as the gateway stored it."""

    stamped: bytes
    events: int


async def read_batches(backbone: str, data_dir: Path) -> list[StoredBatch]:
    """The stamped batch blobs the gateway stored, in order."""
    store = await open_backbone(backbone, data_dir)
    assert isinstance(store, SqliteBackbone | JetStreamBackbone)
    batches: list[StoredBatch] = []
    try:
        async for _, _, stamped in store.batches():
            batches.append(StoredBatch(stamped, len(pb.EventBatch.FromString(stamped).events)))
    finally:
        await store.close()
    return batches


def raw_sqlite_rate(batches: list[StoredBatch], path: Path) -> tuple[float, float]:
    """Events/s of plain WAL + synchronous=FULL inserts of the same blobs, one autocommit
    INSERT (one transaction) per batch, and the CPU milliseconds each batch cost."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE raw (seq INTEGER PRIMARY KEY, stamped BLOB NOT NULL)")
    started, cpu_started = time.perf_counter(), time.process_time()
    for batch in batches:
        conn.execute("INSERT INTO raw (stamped) VALUES (?)", (batch.stamped,))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    conn.close()
    return sum(b.events for b in batches) / elapsed, cpu * 1000 / len(batches)


async def raw_jetstream_rate(
    batches: list[StoredBatch], url: str, agents: int, stream: str
) -> float:
    """Events/s of one-message-per-batch JetStream publishes with the PubAck awaited."""
    prefix = stream.lower().replace("_", "")
    backbone = await JetStreamBackbone.connect(url, stream=stream, subject_prefix=prefix)
    js = backbone._nc.jetstream()
    queue = [(n, b.stamped) for n, b in enumerate(batches)]

    async def publisher() -> None:
        while queue:
            n, frame = queue.pop()
            await js.publish(f"{prefix}.events", frame, headers={"Nats-Msg-Id": f"raw-{n}"})

    started = time.perf_counter()
    await asyncio.gather(*(publisher() for _ in range(agents)))
    elapsed = time.perf_counter() - started
    await backbone.close()
    return sum(b.events for b in batches) / elapsed


async def run_backbone(
    kind: str, pki: Pki, work: Path, args: argparse.Namespace, profile_to: Path | None
) -> dict[str, Any]:
    """Gateway figures and the raw baseline for one backbone.

    With ``--gateways N`` > 1, N independent gateway processes run side by side,
    each with its own data directory (one shared server for JetStream) and its
    own ``--agents`` agents; the figures are their sums.
    """
    nats = NatsServer(work / f"nats-{kind}") if kind == "nats" else None
    if nats is not None:
        nats.start()
    spec = nats.url if nats is not None else "sqlite"
    data_dirs = [work / f"data-{kind}-{g}" for g in range(args.gateways)]
    # SQLite keeps batches and roster in each data directory; JetStream in its one server.
    stores = data_dirs if kind == "sqlite" else data_dirs[:1]
    try:
        for data_dir in stores:
            roster = await open_roster(spec, data_dir)
            for agent, _, _ in pki.agents:
                await roster.append(agent, "registered", "bench")
                await roster.append(agent, "admitted", "bench")
            await roster.close()
        gateways = [
            await start_gateway(pki, d, spec, profile_to if g == 0 else None)
            for g, d in enumerate(data_dirs)
        ]
        latencies: list[float] = []
        pids = [proc.pid for proc, _ in gateways]
        cpu_before, started = sum(map(cpu_seconds, pids)), time.perf_counter()
        agents_cpu_before = time.process_time()
        until = time.monotonic() + args.seconds
        counts = await asyncio.gather(
            *(
                agent_load(pki, g * args.agents + i, address, until, latencies)
                for g, (_, address) in enumerate(gateways)
                for i in range(args.agents)
            )
        )
        elapsed = time.perf_counter() - started
        cpu = sum(map(cpu_seconds, pids)) - cpu_before
        agents_cpu = time.process_time() - agents_cpu_before
        for proc, _ in gateways:
            await stop_gateway(proc)
        events = sum(counts)
        batches = []
        for data_dir in stores:
            batches += await read_batches(spec, data_dir)
        stored_events = sum(b.events for b in batches)
        if stored_events < events:
            raise RuntimeError(f"{kind}: {events} events acknowledged, {stored_events} stored")
        raws, raw_cpu_ms = [], []
        for attempt in range(RAW_REPEATS):
            if kind == "sqlite":
                rate, cpu_ms = raw_sqlite_rate(batches, work / f"raw-{attempt}.sqlite3")
                raws.append(rate)
                raw_cpu_ms.append(cpu_ms)
            else:
                assert nats is not None
                stream = f"RAW_BENCH_{attempt}"
                publishers = len(pki.agents)
                raws.append(await raw_jetstream_rate(batches, nats.url, publishers, stream))
        raw = statistics.median(raws)
    finally:
        if nats is not None:
            nats.stop()
    quantiles = statistics.quantiles(latencies, n=100)
    rate = events / elapsed
    extra = {"raw_cpu_ms_per_batch": round(statistics.median(raw_cpu_ms), 2)} if raw_cpu_ms else {}
    return extra | {
        "events_per_s": round(rate),
        "ack_p50_ms": round(statistics.median(latencies) * 1000, 2),
        "ack_p99_ms": round(quantiles[98] * 1000, 2),
        "batches": len(latencies),
        "gateway_cpu_s": round(cpu, 2),
        "gateway_cpu_ms_per_batch": round(cpu * 1000 / len(latencies), 2),
        "agents_cpu_ms_per_batch": round(agents_cpu * 1000 / len(latencies), 2),
        "events_per_cpu_s": round(events / cpu) if cpu else None,
        "raw_events_per_s": round(raw),
        "raw_runs_events_per_s": [round(r) for r in raws],
        "ratio_to_raw": round(rate / raw, 3),
    }


def pipeline_rate(batches: int) -> float:
    """Events per CPU-second of the admission pipeline alone (decode, validate, stamp, encode).

    In process, no TLS, HTTP or backbone: the ceiling the gateway's per-core figure
    can approach.
    """
    settings = GatewaySettings(rate_per_agent_rps=1e9, burst_per_agent=1e9)
    admission = Admission(settings)
    admission.roster.replay(
        [
            RosterEntry("agent-0", "bench", "registered", 1),
            RosterEntry("agent-0", "bench", "admitted", 2),
        ]
    )
    bodies = Bodies("agent-0")
    ready = [bodies.next() for _ in range(batches)]
    ticket = admission.admit("agent-0", "events", len(ready[0]), time.monotonic())
    for body in ready[:WARMUP_BATCHES]:  # first-call costs (imports, caches) are not per batch
        admission.accept(ticket, body, ReceptionStamp("bench", time.time_ns(), "warm-up"))
    # Keep the last few stamped batches alive, as a gateway does while it publishes them:
    # freeing each 130 KB result at once lets glibc hand the memory back to the kernel
    # and fault it in again for the next batch, which no serving gateway pays.
    in_flight: deque[object] = deque(maxlen=4)
    started = time.process_time()
    for n, body in enumerate(ready):
        stamp = ReceptionStamp("bench", time.time_ns(), f"req-{n}")
        in_flight.append(admission.accept(ticket, body, stamp))
    cpu = time.process_time() - started
    admission.release(ticket)
    return batches * BATCH_EVENTS / cpu


def print_profile(path: Path, top: int = 18) -> None:
    """Where the gateway's time went, by own time."""
    stats = pstats.Stats(str(path))
    stats.sort_stats("tottime").print_stats(top)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    for side, what in COMPARED.items():
        print(f"{side}: {what}")
    with tempfile.TemporaryDirectory(prefix="grid-bench-") as tmp:
        work = Path(tmp)
        pki = make_pki(work, args.agents * args.gateways)
        results: dict[str, Any] = {
            "pipeline_events_per_cpu_s": round(pipeline_rate(100 if args.quick else 400))
        }
        print(f"admission pipeline alone: {results['pipeline_events_per_cpu_s']} events/CPU-s")
        for kind in args.backbones:
            profile_to = work / "gateway.prof" if args.profile and kind == "sqlite" else None
            results[kind] = await run_backbone(kind, pki, work, args, profile_to)
            print(f"{kind}: {json.dumps(results[kind])}", flush=True)
            if profile_to is not None:
                print_profile(profile_to)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (under 60 s in all)")
    parser.add_argument("--seconds", type=float, help="load duration per backbone")
    parser.add_argument(
        "--agents",
        type=int,
        default=AGENTS,
        help="concurrent agents (connections) per gateway",
    )
    parser.add_argument(
        "--gateways",
        type=int,
        default=1,
        help="independent gateway processes side by side (the ceiling of a multi-process "
        "gateway on this machine: no shared state, no hand-off cost)",
    )
    parser.add_argument("--backbones", default="sqlite,nats", help="comma-separated")
    parser.add_argument("--profile", action="store_true", help="cProfile the SQLite gateway")
    args = parser.parse_args()
    args.seconds = args.seconds or (4.0 if args.quick else 15.0)
    args.backbones = [b for b in args.backbones.split(",") if b]
    results = asyncio.run(main_async(args))
    sqlite = results.get("sqlite")
    if not isinstance(sqlite, dict):
        sqlite = None
    summary: dict[str, Any] = {
        "bench": "telemetry",
        "quick": args.quick,
        "batch_events": BATCH_EVENTS,
        "agents": args.agents,
        "gateways": args.gateways,
        "seconds": args.seconds,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpu_count": os.cpu_count(),
        "compared": COMPARED,
        **results,
    }
    if sqlite is not None:
        pipeline_ms = 1000 * BATCH_EVENTS / results["pipeline_events_per_cpu_s"]
        write_ms = sqlite["raw_cpu_ms_per_batch"]
        summary["sqlite_gateway_cpu_ms_per_batch"] = {
            "admission_pipeline": round(pipeline_ms, 2),
            "sqlite_write": write_ms,
            "tls_http_and_rest": round(
                sqlite["gateway_cpu_ms_per_batch"] - pipeline_ms - write_ms, 2
            ),
        }
        summary["targets"] = {
            "sqlite_ratio_to_raw_min": SQLITE_RATIO_TARGET,
            "sqlite_ratio_met": sqlite["ratio_to_raw"] >= SQLITE_RATIO_TARGET,
            "sqlite_events_per_cpu_s_min": SQLITE_PER_CORE_TARGET,
            "sqlite_per_core_met": (sqlite["events_per_cpu_s"] or 0) >= SQLITE_PER_CORE_TARGET,
        }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
