"""The routing bench's picture: p99 latency per strategy, one panel per scenario."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def draw(result: dict[str, Any], path: Path) -> None:
    """Grouped bars of p99 (log scale) per strategy at each rho, one panel per scenario."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # the bench extra is missing
        raise SystemExit("matplotlib is missing: run `make bench-deps`") from exc
    scenarios = result["scenarios"]
    columns = 2 if len(scenarios) > 1 else 1
    rows = math.ceil(len(scenarios) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(7 * columns, 4 * rows), squeeze=False)
    for ax, (name, scenario) in zip(axes.flat, scenarios.items(), strict=False):
        cells = scenario["cells"]
        rhos = list(cells)
        strategies = list(next(iter(cells.values()))["strategies"])
        width = 0.8 / len(strategies)
        for i, strategy in enumerate(strategies):
            values = [cells[rho]["strategies"][strategy]["p99_s"] for rho in rhos]
            xs = [r + (i - len(strategies) / 2 + 0.5) * width for r in range(len(rhos))]
            ax.bar(xs, values, width, label=strategy, color=_color(strategy, i))
        ax.set_xticks(range(len(rhos)), [f"rho {rho}" for rho in rhos])
        ax.set_yscale("log")
        ax.set_ylabel("p99 latency (s)")
        ax.set_title(f"{name} ({scenario['gateways']} gateway(s), {scenario['providers']})")
        ax.grid(axis="y", which="both", alpha=0.3)
    for ax in list(axes.flat)[len(scenarios) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize="small")
    kind = "quick run" if result["quick"] else "full run"
    fig.suptitle(f"Routing quality: p99 per strategy ({kind}, {result['duration_s']:g} s a run)")
    fig.tight_layout(rect=(0, 0.08, 1, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


_COLORS = {"leastLoaded": "#d62728", "oracle": "#2ca02c"}


def _color(strategy: str, i: int) -> str:
    if strategy in _COLORS:
        return _COLORS[strategy]
    if strategy.startswith("litellm_"):
        return ("#1f77b4", "#6baed6", "#08519c")[i % 3]
    return ("#bdbdbd", "#969696", "#737373", "#525252")[i % 4]
