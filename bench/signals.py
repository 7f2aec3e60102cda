"""Benchmark: the mTLS signals listener, and signal propagation on the 3-site mesh.

Two sets of figures, each with a baseline measured in the same run:

* Throughput of ``GET /v1/site/signals`` over mTLS with keep-alive: the real
  `SignalsServer` (classified connections, the listener policy, the budget
  middleware, metrics) serving a 24-provider document, against a trivial
  aiohttp mTLS handler returning the same bytes and ETag. Each server runs in
  its own process; the client (in this process) keeps ``--connections``
  keep-alive connections busy for ``--seconds``. The 304 path (``If-None-Match``
  with the current ETag) is measured separately. Target: the real server at
  least 70 % of the trivial one.
* Propagation delay on the real three-site demo mesh, in gossip and in poll
  mode: load is toggled at vllm-central (16 requests in flight, capacity 4),
  which moves its queue ratio past the ``excluded`` threshold and back. One
  sample is the time from the moment vllm-central's own /metrics shows the
  change to the mtime of the grid-overlay.json, at east and west, that drops
  or restores the central candidate. Target: p99 at most two scrape (gossip)
  or poll intervals plus 1 s.

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
import json  # noqa: E402
import multiprocessing  # noqa: E402
import shutil  # noqa: E402
import ssl  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from grid.adapters.signals_server import SignalsServer  # noqa: E402
from grid.adapters.tls_probe import client_context, server_context  # noqa: E402
from grid.core.routing.scoring import SignalValues  # noqa: E402
from grid.core.routing.signals import ProviderSignals, Published, SignalsFeed, SignalsScope  # noqa: E402
from grid.core.trust import TrustPolicy  # noqa: E402
from grid.core.vocabulary import BackendKind  # noqa: E402
from grid.demo.pki import DevPki, write_dev_pki  # noqa: E402


def _feed() -> SignalsFeed:
    now = datetime.now(UTC)
    feed = SignalsFeed("bench", "east", 1, now)
    entries = [
        ProviderSignals(
            f"p{i}",
            f"p{i}",
            "east",
            BackendKind.LOCAL,
            ("m",),
            True,
            now,
            SignalValues(queue_depth=i / 24, kv_cache_utilization=0.5, p99_latency_ms=120.0),
        )
        for i in range(24)
    ]
    feed.update(entries, now)
    return feed


class _Source:
    def __init__(self) -> None:
        self.feed = _feed()

    def published(self, scope: SignalsScope) -> Published:
        return self.feed.current


async def _serve(kind: str, pki: DevPki, ports: Any, stop: Any) -> None:
    context = server_context(pki.ca, pki.sites["east"].cert, pki.sites["east"].key)
    source = _Source()
    if kind == "grid":
        trust = TrustPolicy.pin(
            pki.sites["east"].fingerprint,
            [pki.sites["west"].fingerprint],
        )
        server = SignalsServer(source, context, lambda: trust, CollectorRegistry())
        _host, port = await server.start("127.0.0.1", 0)
    else:
        published = source.feed.current

        async def handler(request: web.Request) -> web.Response:
            if request.headers.get("If-None-Match") == published.etag:
                return web.Response(status=304, headers={"ETag": published.etag})
            return web.Response(
                body=published.body,
                content_type="application/json",
                headers={"ETag": published.etag},
            )

        app = web.Application()
        app.router.add_get("/v1/site/signals", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = runner.addresses[0][1]
    ports.put(port)
    while not stop.is_set():
        await asyncio.sleep(0.05)


def _server_main(kind: str, pki: DevPki, ports: Any, stop: Any) -> None:
    asyncio.run(_serve(kind, pki, ports, stop))


async def _drive(
    url: str, context: ssl.SSLContext, connections: int, seconds: float, etag: str | None
) -> float:
    """Requests per second over ``connections`` keep-alive connections."""
    connector = aiohttp.TCPConnector(ssl=context, limit=connections)
    headers = {"If-None-Match": etag} if etag else {}
    count = 0
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(deadline: float) -> None:
            nonlocal count
            while time.monotonic() < deadline:
                async with session.get(url, headers=headers) as resp:
                    await resp.read()
                    assert resp.status in (200, 304)
                count += 1

        # Warm up: open every connection (the handshakes are not what is measured).
        warm = time.monotonic() + 0.3
        await asyncio.gather(*(worker(warm) for _ in range(connections)))
        count = 0
        started = time.monotonic()
        await asyncio.gather(*(worker(started + seconds) for _ in range(connections)))
        elapsed = time.monotonic() - started
    return count / elapsed


def throughput(seconds: float, connections: int, rounds: int) -> dict[str, Any]:
    """Requests/s of the real server and the trivial one, for 200 and 304.

    Both servers stay up for the whole run and are measured in alternation,
    ``rounds`` times each, so a noisy neighbour on a shared machine hits both
    alike; the medians are reported.
    """
    samples: dict[str, dict[str, list[float]]] = {
        k: {"rps_200": [], "rps_304": []} for k in ("trivial", "grid")
    }
    with tempfile.TemporaryDirectory(prefix="grid-bench-signals-") as tmp:
        pki = write_dev_pki(Path(tmp), ["east", "west"])
        context = client_context(pki.ca, pki.sites["west"].cert, pki.sites["west"].key)
        ctx = multiprocessing.get_context("spawn")
        stop = ctx.Event()
        urls, procs = {}, []
        try:
            for kind in ("trivial", "grid"):
                ports = ctx.Queue()
                proc = ctx.Process(target=_server_main, args=(kind, pki, ports, stop), daemon=True)
                proc.start()
                procs.append(proc)
                urls[kind] = f"https://127.0.0.1:{ports.get(timeout=30)}/v1/site/signals"

            async def measure() -> None:
                etags = {}
                for kind, url in urls.items():
                    connector = aiohttp.TCPConnector(ssl=context)
                    async with (
                        aiohttp.ClientSession(connector=connector) as session,
                        session.get(url) as resp,
                    ):
                        etags[kind] = resp.headers["ETag"]
                for _ in range(rounds):
                    for kind, url in urls.items():
                        ok = await _drive(url, context, connections, seconds, None)
                        same = await _drive(url, context, connections, seconds, etags[kind])
                        samples[kind]["rps_200"].append(ok)
                        samples[kind]["rps_304"].append(same)

            asyncio.run(measure())
        finally:
            stop.set()
            for proc in procs:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
    results: dict[str, Any] = {
        kind: {path: round(statistics.median(v), 1) for path, v in figures.items()}
        for kind, figures in samples.items()
    }
    for path in ("rps_200", "rps_304"):
        results[f"ratio_{path[4:]}"] = round(results["grid"][path] / results["trivial"][path], 3)
    results["connections"] = connections
    results["rounds"] = rounds
    return results


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


LOADED = "vllm-central"
WATCHERS = ("east", "west")
LOAD_WORKERS = 24
"""In flight at vllm-central (capacity 4): 20 wait, its queue ratio reaches 1 (Excluded)."""


async def _waiting(session: aiohttp.ClientSession, port: int) -> float | None:
    try:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
            text = await resp.text()
    except aiohttp.ClientError:
        return None
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_waiting{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def _listed(overlay_dir: Path) -> tuple[bool, float] | None:
    """(central listed?, mtime) of a site's grid-overlay.json."""
    path = overlay_dir / "grid-overlay.json"
    try:
        mtime = path.stat().st_mtime
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    listed = any(c["cluster"] == LOADED for c in doc["overlay"]["candidates"])
    return listed, mtime


async def _load(session: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> None:
    while not stop.is_set():
        body = {"model": "llama-3.1-8b-instruct", "messages": [{"role": "user", "content": "x"}]}
        try:
            async with session.post(url, json=body) as resp:
                await resp.read()
        except aiohttp.ClientError:
            await asyncio.sleep(0.05)


async def _half_cycle(
    mesh: Any, session: aiohttp.ClientSession, port: int, loading: bool
) -> tuple[list[float], int]:
    """Time each watcher's overlay following vllm-central's /metrics; (samples, missed)."""
    shown = None
    deadline = time.monotonic() + 30
    while shown is None and time.monotonic() < deadline:
        waiting = await _waiting(session, port)
        if waiting is not None and (waiting >= 16 if loading else waiting == 0):
            shown = time.time()
        await asyncio.sleep(0.01)
    if shown is None:
        return [], len(WATCHERS)
    samples, pending = [], set(WATCHERS)
    deadline = time.monotonic() + 15
    while pending and time.monotonic() < deadline:
        for site in list(pending):
            seen = _listed(mesh.plan.sites[site].overlay_dir)
            if seen is not None and seen[0] is not loading:
                samples.append(max(0.0, seen[1] - shown))
                pending.discard(site)
        await asyncio.sleep(0.01)
    return samples, len(pending)


async def _mesh_mode(mode: str, cycles: int) -> dict[str, Any]:
    from grid.demo.mesh import DemoMesh

    root = Path(tempfile.mkdtemp(prefix=f"grid-bench-signals-{mode}-"))
    mesh = DemoMesh(root, ["east", "west", "central"], signal_transport=mode)
    samples: list[float] = []
    missed = 0
    try:
        await mesh.prepare()
        await mesh.start()
        port = next(p.port for p in mesh.plan.providers if p.name == LOADED)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                seen = [_listed(mesh.plan.sites[s].overlay_dir) for s in WATCHERS]
                if all(x is not None and x[0] for x in seen):
                    break
                await asyncio.sleep(0.1)
            for _ in range(cycles):
                stop = asyncio.Event()
                workers = [
                    asyncio.create_task(_load(session, url, stop)) for _ in range(LOAD_WORKERS)
                ]
                got, lost = await _half_cycle(mesh, session, port, loading=True)
                samples += got
                missed += lost
                stop.set()
                await asyncio.gather(*workers, return_exceptions=True)
                got, lost = await _half_cycle(mesh, session, port, loading=False)
                samples += got
                missed += lost
    finally:
        await mesh.stop()
        shutil.rmtree(root, ignore_errors=True)
    interval = mesh.signals_poll_interval_s if mode == "poll" else 1.0
    target = 2 * interval + 1.0
    figures: dict[str, Any] = {"samples": len(samples), "missed": missed, "target_p99_s": target}
    if samples:
        p99 = percentile(samples, 0.99)
        figures.update(
            p50_s=round(percentile(samples, 0.5), 3),
            p99_s=round(p99, 3),
            p99_over_target=round(p99 / target, 3),
        )
    return figures


def propagation(cycles: int) -> dict[str, Any]:
    """Signal change to every watcher's overlay, per mode, on the real 3-site mesh."""
    return {mode: asyncio.run(_mesh_mode(mode, cycles)) for mode in ("gossip", "poll")}


def main() -> None:
    """Run the benchmark and print the figures, the last line as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="finish in under a minute")
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    seconds, rounds = (0.75, 3) if args.quick else (2.0, 7)
    figures: dict[str, Any] = {"throughput": throughput(seconds, args.connections, rounds)}
    figures["propagation"] = propagation(1 if args.quick else 5)
    print(json.dumps(figures, indent=2))
    print(json.dumps(figures, separators=(",", ":")))


if __name__ == "__main__":
    main()
