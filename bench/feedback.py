"""Benchmark: gateway ingest feedback latency on a full signals listener.

The real `SignalsServer` with the ingest route wired as the operator wires it
(`grid.operator.feedback_ingest.wire_ingest`) runs in its own process, once
over the embedded SQLite store (``synchronous=FULL``: every 204 waits for an
fsync) and once over the in-memory store, which is the baseline: the same
POST, the same listener, policy, parsing, admission and single writer, minus
the durable write. For each, in the same run:

* peers hold 248 connections open (an authorized peer certificate, handshaken
  and idle: the peer cap), so the 8 Local slots are all that is left;
* 8 Local reporters, each on its own keep-alive connection, send 100 reports
  per second in all (12.5 each, paced), every one a new sequence, some with a
  rising rejected counter;
* the latency of each POST, until its 204, is recorded; p50 and p99 reported.

Both servers run at once and the load alternates between them in rounds, so a
busy neighbour on a shared machine slows both alike.

``--quick`` keeps it under a minute. The last line printed is one JSON object.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's directory comes first on sys.path, where the
# sibling bench/operator.py would shadow the standard library's `operator`.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import ssl  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import aiohttp  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from grid.adapters.signals_server import INGEST_PATH, SignalsServer  # noqa: E402
from grid.adapters.store.port import ResourceStore  # noqa: E402
from grid.adapters.store.sqlite import SqliteStore  # noqa: E402
from grid.adapters.tls_probe import client_context, server_context  # noqa: E402
from grid.core.routing.signals import Published, SignalsFeed, SignalsScope  # noqa: E402
from grid.core.signals.feedback import Report, report_headers  # noqa: E402
from grid.core.trust import TrustPolicy  # noqa: E402
from grid.demo.pki import DevPki, write_dev_pki  # noqa: E402
from grid.operator.feedback_ingest import wire_ingest  # noqa: E402
from grid.operator.feedback_writer import FeedbackSettings  # noqa: E402
from grid.testing.store import InMemoryStore  # noqa: E402

NETWORK = "bench"
PEERS = 248
REPORTERS = 8
RATE_RPS = 100.0


class _Source:
    def __init__(self) -> None:
        self.feed = SignalsFeed(NETWORK, "east", 1, datetime.now(UTC))

    def published(self, scope: SignalsScope) -> Published:
        return self.feed.current


async def _store(kind: str, root: Path) -> ResourceStore:
    store: ResourceStore
    if kind == "sqlite":
        store = await SqliteStore.open(root / "bench-store.db")
    else:
        store = InMemoryStore()
    await store.create(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": NETWORK},
            "spec": {"signalTransport": {"mode": "poll"}},
        }
    )
    return store


async def _serve(kind: str, pki: DevPki, root: Path, out: Any, stop: Any) -> None:
    store = await _store(kind, root)
    trust = TrustPolicy.pin(
        pki.sites["east"].fingerprint,
        [pki.sites["west"].fingerprint],
    )
    registry = CollectorRegistry()
    context = server_context(pki.ca, pki.sites["east"].cert, pki.sites["east"].key)
    server = SignalsServer(_Source(), context, lambda: trust, registry)
    wire_ingest(server, store, NETWORK, registry, FeedbackSettings())
    _host, port = await server.start("127.0.0.1", 0)
    out.put(("port", port))
    while not stop.is_set():
        if out.empty():
            out.put(("book", server.book.local, server.book.peer))
        await asyncio.sleep(0.05)
    await server.stop()
    await store.close()


def _server_main(kind: str, pki: DevPki, root: Path, out: Any, stop: Any) -> None:
    asyncio.run(_serve(kind, pki, root, out, stop))


async def _hold_peers(port: int, context: ssl.SSLContext) -> list[asyncio.StreamWriter]:
    """Open and handshake ``PEERS`` connections with the peer certificate; keep them idle."""
    writers = []
    for _ in range(PEERS):
        _reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="localhost"
        )
        writers.append(writer)
    return writers


async def _reporter(
    index: int,
    epoch: int,
    url: str,
    context: ssl.SSLContext,
    seconds: float,
    latencies: list[float],
) -> int:
    """One Local reporter: paced reports on one keep-alive connection; returns errors."""
    interval = REPORTERS / RATE_RPS
    errors, sequence, rejected = 0, 0, 0
    connector = aiohttp.TCPConnector(ssl=context, limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        loop = asyncio.get_running_loop()
        start = loop.time() + index * interval / REPORTERS
        deadline = start + seconds
        due = start
        while due < deadline:
            await asyncio.sleep(max(0.0, due - loop.time()))
            sequence += 1
            rejected += sequence % 7 == 0
            report = Report(f"gw-{index}", "bench", epoch, sequence, rejected, sequence % 7 != 0)
            began = time.perf_counter()
            async with session.post(url, headers=report_headers(report)) as resp:
                await resp.read()
                ok = resp.status == 204 and resp.headers.get("x-grid-ingest-sequence") == str(
                    sequence
                )
            latencies.append(time.perf_counter() - began)
            errors += not ok
            due += interval
    return errors


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _peers_held(out: Any, deadline_s: float = 30.0) -> int:
    """The peer count the server process reports, once it reaches ``PEERS`` (or the deadline)."""
    held = 0
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while loop.time() < end:
        with contextlib.suppress(Exception):
            message = await asyncio.to_thread(out.get, True, 0.2)
            if message[0] == "book":
                held = message[2]
                if held == PEERS:
                    return held
    return held


async def _round(
    epoch: int, url: str, local: ssl.SSLContext, seconds: float
) -> tuple[list[float], int]:
    """One round: every reporter starts a new epoch (a gateway restart), then reports."""
    latencies: list[float] = []
    errors = await asyncio.gather(
        *(_reporter(i, epoch, url, local, seconds, latencies) for i in range(REPORTERS))
    )
    return latencies, sum(errors)


async def _measure(
    servers: dict[str, tuple[int, Any]], pki: DevPki, seconds: float, rounds: int
) -> dict[str, Any]:
    """Hold the peers on every server, then alternate load rounds between them."""
    peer = client_context(pki.ca, pki.sites["west"].cert, pki.sites["west"].key)
    local = client_context(pki.ca, pki.sites["east"].cert, pki.sites["east"].key)
    writers, held = [], {}
    for kind, (port, out) in servers.items():
        writers += await _hold_peers(port, peer)
        held[kind] = await _peers_held(out)
    pooled: dict[str, list[float]] = {kind: [] for kind in servers}
    errors = dict.fromkeys(servers, 0)
    elapsed = dict.fromkeys(servers, 0.0)
    for epoch in range(1, rounds + 1):
        for kind, (port, _out) in servers.items():
            began = time.monotonic()
            latencies, failed = await _round(
                epoch, f"https://127.0.0.1:{port}{INGEST_PATH}", local, seconds
            )
            elapsed[kind] += time.monotonic() - began
            pooled[kind] += latencies
            errors[kind] += failed
    for writer in writers:
        writer.close()
    return {
        kind: {
            "requests": len(values),
            "errors": errors[kind],
            "rate_rps": round(len(values) / elapsed[kind], 1),
            "peers_held": held[kind],
            "p50_ms": round(statistics.median(values) * 1000, 3),
            "p99_ms": round(_percentile(values, 0.99) * 1000, 3),
        }
        for kind, values in pooled.items()
    }


def run(seconds: float, rounds: int) -> dict[str, Any]:
    """Both stores, each in its own server process, measured in alternating rounds so
    that a noisy neighbour on a shared machine hits both alike."""
    with tempfile.TemporaryDirectory(prefix="grid-bench-feedback-") as tmp:
        root = Path(tmp)
        pki = write_dev_pki(root, ["east", "west"])
        ctx = multiprocessing.get_context("spawn")
        stop = ctx.Event()
        procs, servers = [], {}
        try:
            for kind in ("memory", "sqlite"):
                out = ctx.Queue()
                proc = ctx.Process(target=_server_main, args=(kind, pki, root, out, stop))
                proc.start()
                procs.append(proc)
                message = out.get(timeout=30)
                while message[0] != "port":
                    message = out.get(timeout=30)
                servers[kind] = (message[1], out)
            return asyncio.run(_measure(servers, pki, seconds, rounds))
        finally:
            stop.set()
            for proc in procs:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run under a minute")
    parser.add_argument("--seconds", type=float, default=None, help="load per round and store")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds")
    args = parser.parse_args()
    seconds = args.seconds or (4.0 if args.quick else 15.0)
    rounds = args.rounds or (2 if args.quick else 4)
    results = run(seconds, rounds)
    memory, sqlite = results["memory"], results["sqlite"]
    for kind, figures in results.items():
        print(f"{kind:>6}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))
    summary = {
        "bench": "feedback",
        "reporters": REPORTERS,
        "target_rps": RATE_RPS,
        "peer_connections": PEERS,
        "sqlite": sqlite,
        "memory": memory,
        "p50_ratio_sqlite_vs_memory": round(sqlite["p50_ms"] / memory["p50_ms"], 2),
        "p99_ratio_sqlite_vs_memory": round(sqlite["p99_ms"] / memory["p99_ms"], 2),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
