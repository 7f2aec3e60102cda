"""Benchmark: routing quality, Grid's selection modes against LiteLLM's Router and an oracle.

Real processes on loopback (SPEC-DECISIONS §14): mock providers
(``grid mock-provider --capacity --service-time-ms``), one ``grid operator``
per site and one ``grid gateway`` per site, run from the praxis.yaml its
operator renders; N sites share the same providers (all at the first site).
Open-loop Poisson arrivals from a seeded trace, one trace per scenario and
rho, which every strategy replays in the same run:

* each Grid mode (``GridNetwork.spec.selectionPolicy.mode``): deterministic,
  roundRobin, random, weightedRandom and leastLoaded, through the gateways;
* LiteLLM's Router in ``simple-shuffle`` (with the providers' weights),
  ``least-busy`` and ``latency-based-routing``: one Router process per gateway
  from the virtualenv ``make bench-deps`` builds, as its proxy would run;
* an oracle that joins the queue a request is answered soonest at, from the
  true queues of every provider (it sends straight to the providers).

Scenarios, each at rho 0.5, 0.8 and 0.95 (rho: offered load as a share of
the providers' total service rate): *homogeneous* (4 providers of capacity 4),
*heterogeneous* (capacities 2, 4, 8, 16 with matching capacityWeight),
*degrading* (provider 0's service time triples halfway) and *three_gateways*
(3 sites, each gateway sending a third of the load, under ``signalTransport:
poll`` so the gateways hold the providers' queue signals). ``--providers``,
``--gateways``, ``--rho`` and ``--degrade`` run one custom scenario instead.

Latency runs from each request's scheduled arrival to its answer. The results
go to bench/results/routing.json and routing.png; the last line printed is
one JSON object with, per strategy, ``p50_s``, ``p99_s``, ``throughput_rps``
and ``errors``, and at the top leastLoaded's ``p99_ratio_to_oracle`` and
``p99_ratio_to_best_litellm`` per scenario at rho 0.8 (targets <= 1.25 and
<= 1.0), ``p99_ratio_to_litellm_least_busy`` (three gateways, target <= 0.85)
and ``shift_s``: seconds until traffic moved off the slowed provider
(target <= 5). ``--quick`` runs 4 s a strategy (8 s degrading) at rho 0.8 only;
the full run, 20 s a strategy at every rho.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's directory comes first on sys.path, where
# bench/operator.py would shadow the standard library's `operator` module.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.append(_HERE)  # last, for benchkit only

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import aiohttp  # noqa: E402

from benchkit import routing_model as m  # noqa: E402
from benchkit.procs import REPO  # noqa: E402
from benchkit.routing_mesh import BenchMesh  # noqa: E402
from benchkit.routing_runs import (  # noqa: E402
    START_LEAD_S,
    LiteLLMWorkers,
    Oracle,
    gateway_sender,
    replay_http,
)
from grid.demo.plan import MODEL  # noqa: E402

RESULTS = REPO / "bench" / "results"
SEED = "grid-routing-bench"
SAMPLE_S = 0.2
"""How often the providers' received counts are sampled in a degrading run."""
Runner = Callable[[float, float], Awaitable[tuple[list[float | None], float]]]
"""A strategy's replay from (perf_counter start, epoch start): (latencies, elapsed)."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[m.Scenario]]:
    """The flags and the scenarios they ask for; a bad value exits 2 naming its flag."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--providers", help="CAP:SERVICE_S[:WEIGHT],... (one custom scenario)")
    parser.add_argument("--gateways", type=int, help="N sites, each gateway 1/N of the load")
    parser.add_argument("--rho", help="offered load as a share of total capacity")
    parser.add_argument("--degrade", help="I:F:T: provider I's service time times F from T s")
    parser.add_argument("--duration", type=float, help="seconds of arrivals per strategy")
    parser.add_argument("--seed", default=SEED, help="seed of the arrival traces")
    parser.add_argument("--quick", action="store_true", help="4 s per strategy, rho 0.8 only")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    try:
        return args, scenarios_of(args)
    except m.UsageError as exc:
        parser.error(str(exc))
    raise AssertionError("unreachable")


def scenarios_of(args: argparse.Namespace) -> list[m.Scenario]:
    duration = m.QUICK_DURATION_S if args.quick else m.FULL_DURATION_S
    if args.duration is not None:
        m.check_positive("--duration", args.duration, 3600)
        duration = args.duration
    custom = (args.providers, args.gateways, args.rho, args.degrade)
    if all(value is None for value in custom):
        standard = m.standard_scenarios(args.quick)
        if args.duration is None:
            return standard
        return [
            m.Scenario(s.name, s.providers, s.gateways, s.rhos, duration, _scaled(s, duration),
                       s.signal_transport)
            for s in standard
        ]  # fmt: skip
    providers = m.parse_providers(args.providers or m.HOMOGENEOUS)
    gateways = 1 if args.gateways is None else args.gateways
    m.check_positive("--gateways", gateways, 16)
    rhos = m.RHOS if args.rho is None else (m.parse_rho(args.rho),)
    degrade = None if args.degrade is None else m.parse_degrade(args.degrade, len(providers))
    transport = "poll" if gateways > 1 else "gossip"
    return [m.Scenario("custom", providers, gateways, rhos, duration, degrade, transport)]


def _scaled(scenario: m.Scenario, duration: float) -> m.Degrade | None:
    """A standard scenario's degradation stays halfway through a changed duration."""
    d = scenario.degrade
    return None if d is None else m.Degrade(d.index, d.factor, round(duration / 2, 3))


async def measured(
    mesh: BenchMesh, http: aiohttp.ClientSession, scenario: m.Scenario, run: Runner
) -> tuple[dict[str, Any], float | None]:
    """One strategy's run, with the degradation and the shift time where the scenario has one."""
    start, epoch = time.perf_counter() + START_LEAD_S, time.time() + START_LEAD_S
    d = scenario.degrade
    samples: list[tuple[float, list[int]]] = []
    sampler = None
    if d is not None:
        await mesh.degrade(http, d.index, d.factor, start - time.perf_counter() + d.at_s)
        sampler = asyncio.create_task(_sample(mesh, http, start, samples))
    try:
        latencies, elapsed = await run(start, epoch)
    finally:
        if sampler is not None:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        if d is not None:
            await mesh.degrade(http, d.index, 1.0, 0.0)
    figures: dict[str, Any] = m.strategy_figures(latencies, elapsed)
    if d is None:
        return figures, None
    figures["slow_share"] = m.slow_shares(samples, d.index, d.at_s)
    return figures, m.shift_time(samples, d.index, d.at_s)


async def _sample(
    mesh: BenchMesh,
    http: aiohttp.ClientSession,
    start: float,
    into: list[tuple[float, list[int]]],
) -> None:
    while True:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            counts = await mesh.received(http)
            into.append((round(time.perf_counter() - start, 3), counts))
        await asyncio.sleep(SAMPLE_S)


def grid_runner(mesh: BenchMesh, http: aiohttp.ClientSession, trace: Any) -> Runner:
    send = gateway_sender(MODEL, mesh.gateway_urls, mesh.client_key)

    async def run(start: float, _epoch: float) -> tuple[list[float | None], float]:
        return await replay_http(http, trace, send, start)

    return run


def oracle_runner(
    mesh: BenchMesh, http: aiohttp.ClientSession, scenario: m.Scenario, trace: Any
) -> Runner:
    oracle = Oracle(MODEL, mesh.provider_urls, scenario.providers, scenario.degrade)

    async def run(start: float, _epoch: float) -> tuple[list[float | None], float]:
        oracle.start = start
        return await replay_http(http, trace, oracle.send, start)

    return run


def litellm_runner(
    workers: LiteLLMWorkers, strategy: str, mesh: BenchMesh, scenario: m.Scenario, trace: Any
) -> Runner:
    deployments = [
        {"api_base": f"{url}/v1", "weight": spec.weight}
        for url, spec in zip(mesh.provider_urls, scenario.providers, strict=True)
    ]

    async def run(_start: float, epoch: float) -> tuple[list[float | None], float]:
        done = await workers.run(strategy, MODEL, deployments, trace, scenario.gateways, epoch)
        if workers.failures:
            log(f"LiteLLM {strategy} failures: {workers.failures}")
        return done

    return run


async def warm(mesh: BenchMesh, http: aiohttp.ClientSession) -> None:
    """A few requests through every gateway, so pools and code paths are warm."""
    send = gateway_sender(MODEL, mesh.gateway_urls, mesh.client_key)
    trace = [m.Arrival(i * 0.02, i % len(mesh.gateway_urls)) for i in range(24)]
    latencies, _elapsed = await replay_http(http, trace, send, time.perf_counter())
    if None in latencies:
        failed = latencies.count(None)
        raise RuntimeError(
            f"{failed} of {len(trace)} warm-up requests failed: see the gateway logs"
        )


async def run_scenario(
    scenario: m.Scenario, seed: str, workers: LiteLLMWorkers | None, work: Path
) -> dict[str, Any]:
    """Every strategy at every rho of one scenario, on one mesh."""
    traces = {
        rho: m.poisson_trace(
            m.offered_rate(scenario.providers, rho),
            scenario.duration_s,
            scenario.gateways,
            f"{seed}:{scenario.name}:{rho}",
        )
        for rho in scenario.rhos
    }
    strategies: dict[float, dict[str, dict[str, Any]]] = {rho: {} for rho in scenario.rhos}
    shifts: dict[float, dict[str, float | None]] = {rho: {} for rho in scenario.rhos}
    mesh = BenchMesh(work / scenario.name, scenario.providers, scenario.gateways,
                     scenario.signal_transport)  # fmt: skip
    connector = aiohttp.TCPConnector(limit=0)
    try:
        await mesh.prepare()
        await mesh.start()
        async with aiohttp.ClientSession(connector=connector) as http:
            for rho in scenario.rhos:  # every strategy back to back at each load
                for name in _names(workers):
                    run = await ready_runner(name, mesh, http, workers, scenario, traces[rho])
                    figures, shift = await measured(mesh, http, scenario, run)
                    strategies[rho][name], shifts[rho][name] = figures, shift
                    log(f"{scenario.name} rho {rho} {name}: {_brief(figures)}"
                        + ("" if shift is None else f" shift {shift} s"))  # fmt: skip
    finally:
        await mesh.stop()
    return describe(scenario, traces, strategies, shifts)


def _names(workers: LiteLLMWorkers | None) -> list[str]:
    litellm = [m.strategy_name(s) for s in m.LITELLM_STRATEGIES] if workers is not None else []
    return [*m.GRID_MODES, *litellm, m.ORACLE]


async def ready_runner(
    name: str,
    mesh: BenchMesh,
    http: aiohttp.ClientSession,
    workers: LiteLLMWorkers | None,
    scenario: m.Scenario,
    trace: Any,
) -> Runner:
    """Strategy ``name``'s runner over ``trace``, its mode declared and its path warmed."""
    if name in m.GRID_MODES:
        await mesh.set_mode(name)
        await warm(mesh, http)
        return grid_runner(mesh, http, trace)
    if name == m.ORACLE:
        return oracle_runner(mesh, http, scenario, trace)
    assert workers is not None
    strategy = next(s for s in m.LITELLM_STRATEGIES if m.strategy_name(s) == name)
    warmup = [m.Arrival(i * 0.02, i % scenario.gateways) for i in range(24)]
    await litellm_runner(workers, strategy, mesh, scenario, warmup)(0.0, time.time())
    return litellm_runner(workers, strategy, mesh, scenario, trace)


def _brief(figures: dict[str, float]) -> str:
    return (f"p50 {figures['p50_s']:.3f} s p99 {figures['p99_s']:.3f} s "
            f"{figures['throughput_rps']:.1f} rps errors {figures['errors']}")  # fmt: skip


def describe(
    scenario: m.Scenario,
    traces: dict[float, Any],
    strategies: dict[float, dict[str, dict[str, float]]],
    shifts: dict[float, dict[str, float | None]],
) -> dict[str, Any]:
    """One scenario's JSON: its set-up and, per rho, every strategy and leastLoaded's ratios."""
    cells = {}
    for rho in scenario.rhos:
        cell: dict[str, Any] = {
            "offered_rps": round(m.offered_rate(scenario.providers, rho), 2),
            "arrivals": len(traces[rho]),
            "strategies": strategies[rho],
            **m.cell_summary(strategies[rho]),
        }
        if scenario.degrade is not None:
            cell["shift_s"] = shifts[rho]
        cells[str(rho)] = cell
    d = scenario.degrade
    return {
        "providers": ",".join(
            f"{p.capacity}:{p.service_s:g}:{p.weight}" for p in scenario.providers
        ),
        "gateways": scenario.gateways,
        "signal_transport": scenario.signal_transport,
        "degrade": None if d is None else {"index": d.index, "factor": d.factor, "at_s": d.at_s},
        "cells": cells,
    }


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """The top-level ratios at the target rho (or the one rho asked for) and the targets."""
    top: dict[str, dict[str, Any]] = {
        "p99_ratio_to_oracle": {},
        "p99_ratio_to_best_litellm": {},
        "p99_ratio_to_litellm_least_busy": {},
        "shift_s": {},
    }
    met: dict[str, bool] = {}
    for name, scenario in result["scenarios"].items():
        cells = scenario["cells"]
        cell = cells.get(str(m.TARGET_RHO)) or next(iter(cells.values()))
        oracle, best = cell["p99_ratio_to_oracle"], cell["p99_ratio_to_best_litellm"]
        top["p99_ratio_to_oracle"][name] = oracle
        top["p99_ratio_to_best_litellm"][name] = best
        met[f"{name}_oracle"] = oracle is not None and oracle <= 1.25
        if best is not None:
            met[f"{name}_best_litellm"] = best <= 1.0
        if scenario["gateways"] > 1 and cell["p99_ratio_to_litellm_least_busy"] is not None:
            busy = cell["p99_ratio_to_litellm_least_busy"]
            top["p99_ratio_to_litellm_least_busy"][name] = busy
            met[f"{name}_least_busy"] = busy <= 0.85
        if "shift_s" in cell:
            top["shift_s"][name] = cell["shift_s"]
            shift = cell["shift_s"].get("leastLoaded")
            met[f"{name}_shift"] = shift is not None and shift <= 5.0
    return {**result, **top, "targets": met, "targets_met": all(met.values())}


def table(result: dict[str, Any]) -> str:
    """p99 seconds per scenario and rho (rows) and strategy (columns)."""
    lines = []
    for name, scenario in result["scenarios"].items():
        cells = scenario["cells"]
        names = list(next(iter(cells.values()))["strategies"])
        lines.append(f"{name}: p99 s | " + " | ".join(names))
        for rho, cell in cells.items():
            row = " | ".join(f"{cell['strategies'][n]['p99_s']:.3f}" for n in names)
            lines.append(f"  rho {rho}: {row} | ll/oracle {cell['p99_ratio_to_oracle']}"
                         f" ll/best-litellm {cell['p99_ratio_to_best_litellm']}")  # fmt: skip
    return "\n".join(lines)


async def main_async(args: argparse.Namespace, scenarios: list[m.Scenario]) -> dict[str, Any]:
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)  # clean up
    work = Path(tempfile.mkdtemp(prefix="grid-bench-routing-"))
    workers = None
    began = time.monotonic()
    if LiteLLMWorkers.available():
        workers = LiteLLMWorkers(max(s.gateways for s in scenarios), work)
    else:
        log("LiteLLM is missing (make bench-deps): compared without it")
    try:
        if workers is not None:
            await workers.ready()
        result: dict[str, Any] = {
            "bench": "routing",
            "quick": args.quick,
            "seed": args.seed,
            "duration_s": scenarios[0].duration_s,
            "litellm": workers is not None,
            "scenarios": {},
        }
        for scenario in scenarios:
            result["scenarios"][scenario.name] = await run_scenario(
                scenario, args.seed, workers, work
            )
    finally:
        if workers is not None:
            workers.stop()
    shutil.rmtree(work, ignore_errors=True)
    result["wall_s"] = round(time.monotonic() - began, 1)
    return summarize(result)


def main() -> None:
    args, scenarios = parse()
    result = asyncio.run(main_async(args, scenarios))
    from benchkit.routing_plot import draw

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "routing.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    draw(result, RESULTS / "routing.png")
    if not args.json:
        print(table(result))
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
