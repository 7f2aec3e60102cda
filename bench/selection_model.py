"""Benchmark: selection in a virtual-time model, where the routing bench's targets can be reached.

`grid.testing.selection_sim` runs the production `select` and `LoadBook`
(``leastLoaded``) against round robin and least-busy per gateway and an
oracle that knows the true queues and service times, in the routing bench's
scenarios, without processes or a clock: each cell is the mean p99 over
``--seeds`` seeded runs. It separates what the selection rule can reach from
what a loaded machine adds, and shows how fresher reports of the others' queue
would change the three-gateway case. The last line is one JSON object: per
scenario each strategy's mean p99 and leastLoaded's ratios to the oracle and
to least-busy.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import replace

from grid.core.routing.load import LoadSettings
from grid.testing.selection_sim import STRATEGIES, Degrade, Model, p99, simulate

SCENARIOS = {
    "homogeneous": Model(),
    "heterogeneous": Model(slots=(2, 4, 8, 16), service_s=1.0),
    "degrading_8s": Model(duration_s=8.0, degrade=Degrade(0, 3.0, 4.0)),
    "degrading_20s": Model(duration_s=20.0, degrade=Degrade(0, 3.0, 10.0)),
    "three_gateways": Model(gateways=3),
    "three_gateways_reports_50ms_whole": Model(
        gateways=3, report_every_s=0.05, settings=LoadSettings(report_decay_s=0.0)
    ),
    "three_gateways_no_reports": Model(gateways=3, report_every_s=None),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=24, help="seeded runs per cell")
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: random)")
    parser.add_argument("--rho", type=float, default=0.8, help="offered load, share of capacity")
    parser.add_argument("--quick", action="store_true", help="6 runs a cell instead of --seeds")
    args = parser.parse_args()
    if args.quick:
        args.seeds = min(args.seeds, 6)
    if not 1 <= args.seeds <= 1000:
        parser.error("--seeds must be in 1..1000")
    if not 0 < args.rho < 1:
        parser.error("--rho must be in (0, 1)")
    first = random.SystemRandom().randrange(2**31) if args.seed is None else args.seed
    print(f"seed {first}, {args.seeds} runs a cell, rho {args.rho}", file=sys.stderr)
    seeds = range(first, first + args.seeds)
    result: dict[str, dict[str, float]] = {}
    print("scenario: mean p99 s | " + " | ".join(STRATEGIES) + " | ll/oracle | ll/least-busy")
    for name, model in SCENARIOS.items():
        model = replace(model, rho=args.rho)
        cell = {s: sum(p99(simulate(model, s, seed)) for seed in seeds) / len(seeds)
                for s in STRATEGIES}  # fmt: skip
        cell["ratio_to_oracle"] = cell["leastLoaded"] / cell["oracle"]
        cell["ratio_to_least_busy"] = cell["leastLoaded"] / cell["leastBusy"]
        result[name] = {k: round(v, 3) for k, v in cell.items()}
        row = " | ".join(f"{cell[s]:.3f}" for s in STRATEGIES)
        print(f"{name}: {row} | {cell['ratio_to_oracle']:.2f} | {cell['ratio_to_least_busy']:.2f}")
    print(json.dumps({"bench": "selection_model", "seed": first, "seeds": args.seeds,
                      "rho": args.rho, "scenarios": result}, sort_keys=True))  # fmt: skip


if __name__ == "__main__":
    main()
