"""Fault campaign benchmark: real operators and gateways, faults one after another.

Three sites (``grid operator`` and ``grid gateway`` processes, mock providers)
run under poll with their SWIM traffic through a seeded fault proxy
(`grid.testing.fault_proxy`). The campaign (`grid.testing.fault_steps`) injects,
in order: a partition of one site and its healing; 20% and 50% datagram loss;
SIGKILL of an operator mid-render and of a gateway mid-request; a store that
refuses writes (30 s; 4 s with ``--quick``); a wall clock skewed by +30 s and
-30 s on one site. After each it checks the invariants (membership, overlay
changes, budget cents, acknowledged feedback, no double charge) and prints a
table: fault, time to detect, time to converge after healing, invariants held.
The last line is one JSON object; ``--json`` prints only that.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's directory comes first on sys.path, where
# bench/operator.py would shadow the standard library's `operator` module.
_HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0] or ".") == _HERE:
    sys.path.pop(0)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import aiohttp  # noqa: E402

from grid.testing.fault_campaign import LONG, SHORT, Campaign, FaultResult  # noqa: E402
from grid.testing.fault_mesh import FaultMesh  # noqa: E402
from grid.testing.fault_steps import run_faults  # noqa: E402

SITES = ["east", "west", "central"]


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(results: list[FaultResult]) -> str:
    """The campaign's table, one fault a row."""
    rows = [("fault", "detect s", "converge s", "invariants held")]
    for r in results:
        failed = [k for k, ok in r.invariants.items() if not ok]
        rows.append((r.fault, _cell(r.detect_s), _cell(r.converge_s),
                     "yes" if r.held else "NO: " + ", ".join(failed)))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


async def campaign(root: Path, seed: int, quick: bool) -> tuple[list[FaultResult], float]:
    """Start the mesh, run every fault, stop the mesh; the results and the wall time."""
    fm = FaultMesh(root, SITES, seed)
    start = time.monotonic()
    try:
        await fm.start()
        async with aiohttp.ClientSession() as http:
            c = Campaign(fm, http, SHORT if quick else LONG)
            try:
                await c.open()
                await run_faults(c, lambda r: print(f"{r}", file=sys.stderr, flush=True))
            finally:
                await c.close()
        return c.results, time.monotonic() - start
    finally:
        await fm.stop()


def _row(r: FaultResult) -> dict[str, Any]:
    keys = ("fault", "detect_s", "converge_s", "invariants", "waited_s", "notes")
    return {k: getattr(r, k) for k in keys}


def summary(results: list[FaultResult], seed: int, quick: bool, wall_s: float) -> dict[str, Any]:
    return {
        "bench": "faults",
        "quick": quick,
        "seed": seed,
        "wall_s": round(wall_s, 1),
        "all_held": all(r.held for r in results),
        "faults": [_row(r) for r in results],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the short form (make test's)")
    parser.add_argument("--json", action="store_true", help="print only the JSON summary")
    parser.add_argument("--seed", type=int, default=None, help="the fault proxy's seed")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    if not args.json:
        print(f"fault campaign seed {seed} ({'short' if args.quick else 'long'} form)", flush=True)
    with tempfile.TemporaryDirectory(prefix="grid-faults-") as tmp:
        results, wall = asyncio.run(campaign(Path(tmp), seed, args.quick))
    if not args.json:
        print(table(results))
        for r in results:
            for note in r.notes:
                print(f"  {r.fault}: {note}")
    print(json.dumps(summary(results, seed, args.quick, wall)))


if __name__ == "__main__":
    main()
