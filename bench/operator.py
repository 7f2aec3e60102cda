"""Benchmark: the site operator, on a live mesh and in process.

Two figures, each with a baseline measured in the same run:

* Signal-to-overlay latency on the real three-site demo mesh (east, west,
  central on loopback; providers scraped every 1 s; SWIM probes every 500 ms).
  Load is toggled at vllm-central: 16 chat completions kept in flight (capacity
  4, so 12 wait) and then none. One sample is the time from the first moment
  vllm-central's own /metrics shows the change (``vllm:num_requests_waiting``
  >= 8 when loading, 0 when idle; polled every 10 ms) to the modification time
  of the grid-overlay.json rewrite, at one site, that carries it (the
  candidate's ``score_breakdown.queue_depth`` under half its idle value, or back
  above 90 % of it). Central's own overlay is the local path (scrape, render);
  east's and west's are the remote path (scrape, SWIM dissemination, render).
  Baselines: the scrape interval, and the local path for the remote one.
* Reconcile CPU with 1,000 providers: an `Operator` over an embedded SQLite
  store and a CRDT replica holding 1,000 remote provider records from nine
  peer sites. `Operator.reconcile_overlays` (store reads, live records, mesh
  view, scoring, render, revision check, write, status) is timed with
  ``time.process_time`` per call, unchanged state and with one record changed
  per call (which rewrites the overlay); so is the pure path (mesh view and
  render, no store), from scratch and through a render cache that saw the
  previous state, as the operator's is. Baseline: ``json.dumps`` of the
  resulting envelope.
  The full run repeats it with 10,000 providers over 50 sites.
* Steady-state CPU share on the live demo: each operator process's CPU
  seconds (``/proc/PID/stat``) per wall second, after a 20 s warm-up, over
  60 s, without traffic and then with the demo's 2 requests a second through
  the gateways (``steady_cpu_share_idle`` / ``_traffic``: the mean over the
  three operators; ``--quick`` warms up 10 s and measures 15 s each).

``--quick`` keeps it under a minute. The last line printed is one JSON object.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's directory comes first on sys.path, where this
# file would shadow the standard library's `operator` module: drop it first.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.append(_HERE)  # last, for benchkit only: the standard library comes first

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import datetime as dt  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import aiohttp  # noqa: E402

from benchkit.reconcile_mesh import PEER_SITES, Peers, reconcile_docs  # noqa: E402
from grid.adapters.store.sqlite import SqliteStore  # noqa: E402
from grid.core.resources import GridSite  # noqa: E402
from grid.core.resources.phases import SitePhase  # noqa: E402
from grid.core.routing.mesh_view import (  # noqa: E402
    OriginRecord,
    RecordViews,
    live_records,
    mesh_inputs,
)
from grid.core.routing.render import render  # noqa: E402
from grid.core.routing.render_cache import RenderCache  # noqa: E402
from grid.demo.cpu_share import steady_cpu  # noqa: E402
from grid.demo.mesh import DemoMesh  # noqa: E402
from grid.demo.plan import MODEL  # noqa: E402
from grid.operator.runtime import Operator  # noqa: E402
from grid.operator.settings import OperatorSettings  # noqa: E402
from grid.operator.startup import select_network  # noqa: E402

SITES = ["east", "west", "central"]
TARGET = "vllm-central"
TARGET_SITE = "central"
SCRAPE_INTERVAL_S = 1.0
LOAD_WORKERS = 16
LOAD_SHOWN_WAITING = 8
POLL_S = 0.01
PHASE_TIMEOUT_S = 10.0


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (q in [0, 100]) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


# -- the live mesh ------------------------------------------------------------------


async def _waiting(session: aiohttp.ClientSession, port: int) -> float | None:
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
            text = await resp.text()
    except (aiohttp.ClientError, TimeoutError):
        return None
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_waiting{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def _queue_share(overlay_dir: Path) -> tuple[float, float] | None:
    """(queue_depth share of TARGET, mtime) from a site's grid-overlay.json."""
    path = overlay_dir / "grid-overlay.json"
    try:
        mtime = path.stat().st_mtime
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    for c in doc["overlay"]["candidates"]:
        if c["cluster"] == TARGET and "score_breakdown" in c:
            return float(c["score_breakdown"]["queue_depth"]), mtime
    return None


async def _load(session: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> None:
    while not stop.is_set():
        body = {"model": MODEL, "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=20)) as r:
                await r.read()


async def _half_cycle(
    mesh: DemoMesh, session: aiohttp.ClientSession, idle: dict[str, float], loading: bool
) -> dict[str, float]:
    """After the load was switched, time each site's overlay catching up with /metrics."""
    port = next(p.port for p in mesh.plan.providers if p.name == TARGET)
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    shown: float | None = None
    while shown is None and time.monotonic() < deadline:
        waiting = await _waiting(session, port)
        if waiting is not None and (waiting >= LOAD_SHOWN_WAITING if loading else waiting == 0):
            shown = time.time()
        else:
            await asyncio.sleep(POLL_S)
    if shown is None:
        raise TimeoutError(f"{TARGET}'s /metrics never showed the change")
    lags: dict[str, float] = {}
    while len(lags) < len(SITES) and time.monotonic() < deadline:
        for site in SITES:
            if site in lags:
                continue
            seen = _queue_share(mesh.plan.sites[site].overlay_dir)
            if seen is None:
                continue
            share, mtime = seen
            if (share < idle[site] / 2) if loading else (share >= 0.9 * idle[site]):
                lags[site] = max(0.0, mtime - shown)
        await asyncio.sleep(POLL_S)
    return lags


async def _idle_shares(mesh: DemoMesh) -> dict[str, float]:
    deadline = time.monotonic() + 45.0
    while time.monotonic() < deadline:
        shares = {s: _queue_share(mesh.plan.sites[s].overlay_dir) for s in SITES}
        if all(v is not None and v[0] > 0 for v in shares.values()):
            return {s: v[0] for s, v in shares.items() if v is not None}
        await asyncio.sleep(0.2)
    raise TimeoutError(f"not every site lists {TARGET} with a score")


async def mesh_latency(mesh: DemoMesh, cycles: int) -> dict[str, Any]:
    """Toggle load ``cycles`` times; per-site signal-to-overlay latency samples."""
    samples: dict[str, list[float]] = {s: [] for s in SITES}
    missed = 0
    idle = await _idle_shares(mesh)
    port = next(p.port for p in mesh.plan.providers if p.name == TARGET)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        for _ in range(cycles):
            stop = asyncio.Event()
            workers = [asyncio.create_task(_load(session, url, stop)) for _ in range(LOAD_WORKERS)]
            try:
                loaded = await _half_cycle(mesh, session, idle, loading=True)
            finally:
                stop.set()
                await asyncio.gather(*workers)
            released = await _half_cycle(mesh, session, idle, loading=False)
            for lags in (loaded, released):
                missed += len(SITES) - len(lags)
                for site, lag in lags.items():
                    samples[site].append(lag)
    return _latency_figures(samples, missed)


async def live_mesh(
    cycles: int, warmup_s: float, measure_s: float
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """On one demo mesh: steady CPU shares (if ``measure_s``), then latency (if ``cycles``)."""
    root = Path(tempfile.mkdtemp(prefix="grid-bench-operator-"))
    mesh = DemoMesh(root, SITES)
    try:
        await mesh.prepare()
        await mesh.start()
        pids = {}
        for site in SITES:
            process = mesh.children[f"operator-{site}"].process
            assert process is not None
            pids[site] = process.pid
        steady = await steady_cpu(mesh, pids, warmup_s, measure_s) if measure_s > 0 else None
        latency = await mesh_latency(mesh, cycles) if cycles > 0 else None
    finally:
        await mesh.stop()
        shutil.rmtree(root, ignore_errors=True)
    return steady, latency


def _latency_figures(samples: dict[str, list[float]], missed: int) -> dict[str, Any]:
    local = samples[TARGET_SITE]
    remote = [v for s, vs in samples.items() if s != TARGET_SITE for v in vs]
    every = local + remote
    if not local or not remote:
        raise RuntimeError("no latency samples collected")
    ms = 1000.0
    return {
        "samples": len(every),
        "samples_local": len(local),
        "samples_remote": len(remote),
        "missed": missed,
        "p50_ms": round(percentile(every, 50) * ms, 1),
        "p99_ms": round(percentile(every, 99) * ms, 1),
        "local_p50_ms": round(percentile(local, 50) * ms, 1),
        "local_p99_ms": round(percentile(local, 99) * ms, 1),
        "remote_p50_ms": round(percentile(remote, 50) * ms, 1),
        "remote_p99_ms": round(percentile(remote, 99) * ms, 1),
        "scrape_interval_ms": SCRAPE_INTERVAL_S * ms,
        "p50_over_scrape_interval": round(percentile(every, 50) / SCRAPE_INTERVAL_S, 3),
        "p99_over_scrape_interval": round(percentile(every, 99) / SCRAPE_INTERVAL_S, 3),
        "remote_over_local_p50": round(
            percentile(remote, 50) / max(percentile(local, 50), 1e-3), 2
        ),
    }


# -- reconcile CPU in process ----------------------------------------------------------


def _cpu(samples: list[float]) -> dict[str, float]:
    return {
        "min_ms": round(min(samples) * 1000, 3),
        "median_ms": round(statistics.median(samples) * 1000, 3),
    }


async def _timed(coro_fn: Any) -> float:
    gc.collect()
    start = time.process_time()
    await coro_fn()
    return time.process_time() - start


class PurePath:
    """A round's pure path (live records, mesh view, render), from scratch or kept.

    ``kept``: through the record views and render cache an operator keeps, which
    saw the previous state; otherwise nothing is kept between calls.
    """

    def __init__(self, replica: Any, network: Any, sites: list[GridSite], *, kept: bool) -> None:
        self.replica, self.network, self.sites = replica, network, sites
        self.views = RecordViews() if kept else None
        self.cache = RenderCache() if kept else None

    def render(self) -> Any:
        """One pure render of the replica's current records."""
        now = dt.datetime.now(dt.UTC)
        records = live_records(
            (OriginRecord(o, pid, r) for o, pid, r in self.replica.providers()),
            "s0",
            now.timestamp(),
            3600.0,
        )
        inputs = mesh_inputs(self.network, self.sites, [], [], records, "s0", views=self.views)
        if self.views is not None:
            self.views.next_round()
        return render(
            inputs, site="s0", gateway="edge", namespace="grid", now=now, cache=self.cache
        )

    async def __call__(self) -> None:
        """`render`, as `_timed` calls it."""
        self.render()


async def reconcile_cpu(providers: int, repeat: int, peers: int = PEER_SITES) -> dict[str, Any]:
    """CPU per `Operator.reconcile_overlays` with ``providers`` remote records."""
    root = Path(tempfile.mkdtemp(prefix="grid-bench-reconcile-"))
    store = await SqliteStore.open(root / "store.db")
    try:
        for doc in reconcile_docs(peers + 1):
            await store.create(doc)
        settings = OperatorSettings(
            site="s0", store=f"sqlite:{root / 'store.db'}", overlay_dir=root / "out"
        )
        operator = Operator(settings, store)
        operator.served.network = await select_network(store, None)
        # Every peer site is verified (Active), as in a converged mesh: an
        # unverified site's candidates are never rendered.
        operator.sites.phases = {f"s{i}": SitePhase.ACTIVE for i in range(peers + 1)}
        # The peers publish unsigned items, as a mesh without a CA does: an operator
        # built without --ca still authenticates origins, and would believe none.
        operator.replica.auth = None
        mesh = Peers(providers, operator.replica, peers)
        await operator.reconcile_overlays()
        envelope_text = (root / "out" / "grid-overlay.json").read_text()
        envelope = json.loads(envelope_text)
        unchanged, changed, pure, kept, dumps = [], [], [], [], []
        writes_before = operator.writer.writes
        network = operator.served.network
        sites = [GridSite.model_validate(o) for o in await store.list("GridSite")]

        pure_path = PurePath(operator.replica, network, sites, kept=False)
        pure_path_kept = PurePath(operator.replica, network, sites, kept=True)
        pure_path_kept.render()  # the cache's first render drafts everything

        async def dump() -> None:
            json.dumps(envelope)

        for step in range(repeat):
            unchanged.append(await _timed(operator.reconcile_overlays))
            mesh.change(step + 1)
            changed.append(await _timed(operator.reconcile_overlays))
            pure.append(await _timed(pure_path))
            kept.append(await _timed(pure_path_kept))
            dumps.append(await _timed(dump))
        rewrites = operator.writer.writes - writes_before
    finally:
        await store.close()
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(dumps)
    return {
        "providers": providers,
        "sites": peers + 1,
        "candidates": len(envelope["overlay"]["candidates"]),
        "envelope_bytes": len(envelope_text),
        "repeat": repeat,
        "overlay_rewrites": rewrites,
        "reconcile_unchanged": _cpu(unchanged),
        "reconcile_changed": _cpu(changed),
        "render_path": _cpu(pure),
        "render_path_cached": _cpu(kept),
        "json_dumps": _cpu(dumps),
        "reconcile_unchanged_over_dumps": round(statistics.median(unchanged) / base, 2),
        "reconcile_changed_over_dumps": round(statistics.median(changed) / base, 2),
        "render_path_over_dumps": round(statistics.median(pure) / base, 2),
        "render_path_cached_over_dumps": round(statistics.median(kept) / base, 2),
    }


def _print_cpu(cpu: dict[str, Any]) -> None:
    print(
        f"reconcile with {cpu['providers']} providers over {cpu['sites']} sites "
        f"({cpu['candidates']} candidates): "
        f"unchanged {cpu['reconcile_unchanged']['median_ms']} ms CPU "
        f"({cpu['reconcile_unchanged_over_dumps']}x json.dumps), "
        f"changed {cpu['reconcile_changed']['median_ms']} ms "
        f"({cpu['reconcile_changed_over_dumps']}x), render path "
        f"{cpu['render_path']['median_ms']} ms ({cpu['render_path_over_dumps']}x), through "
        f"a render cache {cpu['render_path_cached']['median_ms']} ms "
        f"({cpu['render_path_cached_over_dumps']}x); "
        f"json.dumps {cpu['json_dumps']['median_ms']} ms"
    )


def _print_live(steady: dict[str, Any] | None, latency: dict[str, Any] | None) -> None:
    if steady is not None:
        print(
            f"steady CPU share per operator over {steady['measure_s']} s: idle "
            f"{steady['idle']} (mean {steady['idle_mean']}), with {steady['traffic_rps']} req/s "
            f"{steady['traffic']} (mean {steady['traffic_mean']})"
        )
    if latency is not None:
        print(
            f"signal -> overlay over {latency['samples']} samples: p50 {latency['p50_ms']} ms, "
            f"p99 {latency['p99_ms']} ms ({latency['p50_over_scrape_interval']}x / "
            f"{latency['p99_over_scrape_interval']}x the {latency['scrape_interval_ms']:.0f} ms "
            f"scrape interval); local p50 {latency['local_p50_ms']} ms, remote p50 "
            f"{latency['remote_p50_ms']} ms ({latency['remote_over_local_p50']}x local)"
        )


async def main_async(quick: bool, providers: int, parts: set[str]) -> dict[str, Any]:
    """Run the measurements in ``parts`` and print the human-readable lines."""
    started = time.monotonic()
    result: dict[str, Any] = {"bench": "operator", "quick": quick}
    if "reconcile" in parts:
        cpu = await reconcile_cpu(providers, repeat=8 if quick else 30)
        _print_cpu(cpu)
        result["reconcile_cpu"] = cpu
        result["reconcile_unchanged_ratio_to_dumps"] = cpu["reconcile_unchanged_over_dumps"]
        result["reconcile_one_changed_ratio_to_dumps"] = cpu["reconcile_changed_over_dumps"]
        if not quick:
            large = await reconcile_cpu(10_000, repeat=10, peers=49)
            _print_cpu(large)
            result["reconcile_cpu_10000"] = large
            result["reconcile_unchanged_ratio_to_dumps_10000"] = large[
                "reconcile_unchanged_over_dumps"
            ]
            result["reconcile_one_changed_ratio_to_dumps_10000"] = large[
                "reconcile_changed_over_dumps"
            ]
    warmup_s, measure_s = (10.0, 15.0) if quick else (20.0, 60.0)
    steady, latency = None, None
    if parts & {"steady", "latency"}:
        steady, latency = await live_mesh(
            (3 if quick else 10) if "latency" in parts else 0,
            warmup_s,
            measure_s if "steady" in parts else 0.0,
        )
    _print_live(steady, latency)
    if steady is not None:
        result["steady_cpu"] = steady
        result["steady_cpu_share_idle"] = steady["idle_mean"]
        result["steady_cpu_share_traffic"] = steady["traffic_mean"]
    if latency is not None:
        result["signal_to_overlay"] = latency
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


PARTS = ("reconcile", "steady", "latency")


def main() -> None:
    """Parse flags, run, print the JSON summary as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, under a minute")
    parser.add_argument("--providers", type=int, default=1000, help="providers in the replica")
    parser.add_argument(
        "--only", choices=PARTS, action="append", help="run only these parts (repeatable)"
    )
    args = parser.parse_args()
    result = asyncio.run(main_async(args.quick, args.providers, set(args.only or PARTS)))
    print(json.dumps(result, sort_keys=True))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
