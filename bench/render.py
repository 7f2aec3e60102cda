"""Benchmark: render an overlay for a large grid, against json.dumps of the same document.

The grid is built in memory (no YAML): ``--sites`` GridSites (default 50) and
``--providers`` InferenceProviders (default 1,000) spread round-robin over them,
each serving ``--models`` models (default 3), with a signal entry for every
provider. That is 3,000 (provider, model) candidates. The renderer scores and
sorts all of them, then keeps the top 1,024: §5 caps an overlay at 1,024
candidates and the renderer never emits one its own validator would reject (the
rest appear in ``grid explain`` as ``candidate_limit``).

Three paths are measured (see `scenarios`): ``render`` (the pure function behind
``grid render``, from resources), ``render_uncapped`` (the same, keeping every
ranked candidate; such an overlay is past the verify limit) and ``operator``
(from the per-provider candidate groups to the envelope, as the operator re-renders).
For each, measured in the same run:
* time: best-of-N process CPU time of the path divided by best-of-N `json.dumps`
  of its final envelope, interleaved;
* memory: tracemalloc peak during one run divided by the peak during one
  `json.dumps` of that same envelope.
The last line printed is one JSON object with every figure; its top-level
``time_ratio`` and ``memory_ratio`` are the ``render`` path's. Target: <= 5x.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's directory comes first on sys.path, where
# bench/operator.py would shadow the standard library's `operator` module.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from collections.abc import Callable  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from typing import Any  # noqa: E402

from grid.core.overlay import (  # noqa: E402
    CANDIDATES_MAX,
    Provenance,
    Scope,
    build_envelope,
    build_overlay,
)
from grid.core.resources import GridNetwork, GridSite, InferenceProvider  # noqa: E402
from grid.core.routing.candidate import SignalValues  # noqa: E402
from grid.core.routing.ranking import order_candidates  # noqa: E402
from grid.core.routing.render import RenderInputs, render  # noqa: E402
from grid.core.routing.signals import ProviderSignals, SignalsDocument  # noqa: E402
from grid.core.vocabulary import BackendKind  # noqa: E402

API = "grid.praxis-proxy.io/v1alpha1"
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def build(sites: int, providers: int, models: int) -> tuple[RenderInputs, SignalsDocument]:
    """An in-memory grid and a signals document covering every provider."""
    network = GridNetwork.model_validate(
        {
            "apiVersion": API,
            "kind": "GridNetwork",
            "metadata": {"name": "bench"},
            "spec": {"gatewayRefs": [{"name": "edge", "namespace": "grid", "localSiteName": "s0"}]},
        }
    )
    grid_sites = [
        GridSite.model_validate(
            {
                "apiVersion": API,
                "kind": "GridSite",
                "metadata": {"name": f"s{i}"},
                "spec": {
                    "gridNetworkRef": "bench",
                    "region": f"r{i % 5}",
                    "zone": f"r{i % 5}-z{i % 3}",
                },
            }
        )
        for i in range(sites)
    ]
    kinds = ["remote", "remote", "remote", "cloud_managed", "api_provider"]
    grid_providers = []
    entries = []
    for i in range(providers):
        site = f"s{i % sites}"
        kind = "local" if site == "s0" and i % 5 < 3 else kinds[i % 5]
        grid_providers.append(
            InferenceProvider.model_validate(
                {
                    "apiVersion": API,
                    "kind": "InferenceProvider",
                    "metadata": {"name": f"p{i}", "labels": {"grid.praxis-proxy.io/site": site}},
                    "spec": {
                        "gridNetworkRef": "bench",
                        "backendKind": kind,
                        "providerKind": "self_hosted",
                        "models": [
                            {"name": f"model-{(i + m) % (models * 4)}"} for m in range(models)
                        ],
                        "cost": {"perMillionInputTokens": (i % 40) * 0.5},
                    },
                }
            )
        )
        entries.append(
            ProviderSignals(
                name=f"p{i}",
                cluster=f"p{i}",
                site=site,
                backend_kind=BackendKind(kind),
                models=(),
                healthy=i % 97 != 0,
                observed_at=NOW - timedelta(seconds=i % 90),
                signals=SignalValues(
                    queue_depth=(i * 7 % 100) / 100,
                    kv_cache_utilization=(i * 13 % 100) / 100,
                    prefix_cache_hit_ratio=(i * 3 % 100) / 100,
                    p99_latency_ms=float(200 + i * 37 % 4000),
                ),
            )
        )
    signals = SignalsDocument("1.0.0", "bench", "s0", 1, 1, NOW, tuple(entries))
    inputs = RenderInputs(networks=[network], sites=grid_sites, providers=grid_providers)
    return inputs, signals


def best_times(
    first: Callable[[], object], second: Callable[[], object], repeat: int
) -> tuple[float, float]:
    """The fastest of ``repeat`` interleaved runs of each, in seconds.

    Process CPU time is measured rather than wall time, and the runs are
    interleaved, so that other load on a shared machine skews neither figure.
    """
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for i, fn in enumerate((first, second)):
            gc.collect()
            start = time.process_time()
            fn()
            best[i] = min(best[i], time.process_time() - start)
    return best[0], best[1]


def peak_bytes(fn: Callable[[], object]) -> int:
    """tracemalloc's peak traced allocation while ``fn`` runs (its result is kept)."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    result = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return peak


def compare(produce: Callable[[], dict[str, Any]], repeat: int, scored: int) -> dict[str, Any]:
    """Time and peak memory of ``produce`` (returns an envelope) against json.dumps of it."""
    envelope = produce()

    def do_dumps() -> str:
        return json.dumps(envelope)

    produce_s, dumps_s = best_times(produce, do_dumps, repeat)
    produce_peak = peak_bytes(produce)
    dumps_peak = peak_bytes(do_dumps)
    return {
        "candidates_scored": scored,
        "candidates_emitted": len(envelope["overlay"]["candidates"]),
        "envelope_bytes": len(do_dumps()),
        "render_s": round(produce_s, 6),
        "json_dumps_s": round(dumps_s, 6),
        "time_ratio": round(produce_s / dumps_s, 2),
        "render_peak_bytes": produce_peak,
        "json_dumps_peak_bytes": dumps_peak,
        "memory_ratio": round(produce_peak / dumps_peak, 2),
    }


def scenarios(
    inputs: RenderInputs, signals: SignalsDocument
) -> dict[str, tuple[Callable[[], dict[str, Any]], int]]:
    """The three measured paths, each returning the final envelope.

    * ``render``: `grid render`'s pure function from resources, top 1,024 kept;
    * ``render_uncapped``: the same with every ranked candidate kept;
    * ``operator``: what the operator runs each time state changes, from the
      candidate groups it already holds (one per provider, built from its
      replica) to the envelope: scoring, sort, overlay, JCS digest, top 1,024 kept.
    """

    def do_render(limit: int | None) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            rendered = render(
                inputs, site="s0", gateway="edge", now=NOW, signals=signals, candidates_max=limit
            )
            return rendered.envelope

        return run

    evaluated = render(inputs, site="s0", gateway="edge", now=NOW, signals=signals).evaluated
    groups = [d.candidates for d in evaluated.drafts if d.exclusion is None]
    context = evaluated.context
    scope = Scope("bench", "edge", "grid", "s0")
    provenance = Provenance("bench", "bench", None, None, NOW)

    def do_operator() -> dict[str, Any]:
        ranked = order_candidates(groups, context).ranking.ranked[:CANDIDATES_MAX]
        return build_envelope(build_overlay("bench", "s0", ranked, NOW), scope, provenance)

    scored = sum(len(group) for group in groups)
    return {
        "render": (do_render(CANDIDATES_MAX), scored),
        "render_uncapped": (do_render(None), scored),
        "operator": (do_operator, scored),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark and print the figures; the last line is JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (< 60 s)")
    parser.add_argument("--sites", type=int, default=50)
    parser.add_argument("--providers", type=int, default=1000)
    parser.add_argument("--models", type=int, default=3)
    args = parser.parse_args(argv)
    repeat = 7 if args.quick else 30
    inputs, signals = build(args.sites, args.providers, args.models)
    figures = {
        name: compare(produce, repeat, scored)
        for name, (produce, scored) in scenarios(inputs, signals).items()
    }
    for name, f in figures.items():
        print(
            f"{name}: {f['candidates_emitted']} of {f['candidates_scored']} candidates in "
            f"{f['render_s'] * 1000:.1f} ms CPU (json.dumps {f['json_dumps_s'] * 1000:.2f} ms): "
            f"time x{f['time_ratio']}, memory x{f['memory_ratio']}",
            file=sys.stderr,
        )
    result = {
        "bench": "render",
        "sites": args.sites,
        "providers": args.providers,
        "models_per_provider": args.models,
        "time_ratio": figures["render"]["time_ratio"],
        "memory_ratio": figures["render"]["memory_ratio"],
        "target_ratio_max": 5,
        **figures,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
