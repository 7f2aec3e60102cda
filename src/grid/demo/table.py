"""The live view of ``grid demo``: each site's ranked candidates from its overlay file.

Models, MCP tools and A2A agents stand side by side, the ``kind`` column telling
them apart (§16). The ``reqs`` column counts the requests each candidate's cluster received
through any site's gateway, so traffic can be seen following the ranking.
Below them, `budget_table` shows each policy tenant's spend and ratio as every
site sees it (``status.budgetStatus``): a lower bound of the grid's spend that
the sites agree on once gossip has caught up.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table

from grid.adapters.store.sqlite import SqliteStore
from grid.core.vocabulary import KIND_NOUNS, AdmissionState, SelectionTier
from grid.errors import GridError
from grid.operator.output import CONFIG_KEY


def read_overlay(overlay_dir: Path) -> dict[str, Any] | None:
    """The site's current grid-config.json, or None before the first write."""
    try:
        data = json.loads((overlay_dir / CONFIG_KEY).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


_SHORT = {
    SelectionTier.SAME_SITE.value: "site",
    SelectionTier.SAME_ZONE.value: "zone",
    SelectionTier.SAME_REGION.value: "region",
    SelectionTier.CROSS_REGION.value: "cross",
    AdmissionState.NEW_AND_EXISTING.value: "new+existing",
    AdmissionState.EXISTING_ONLY.value: "existing-only",
}


_COLUMNS = (
    "rank", "kind", "name", "site", "cluster", "tier", "admission", "score", "fresh", "reqs",
)  # fmt: skip


def site_table(
    site: str,
    overlay: dict[str, Any] | None,
    counts: dict[str, int] | None = None,
    *,
    scoring: bool = True,
) -> Table:
    """One site's candidates in rank order, with the routed requests of each cluster.

    Under poll the title says local scoring is off (the score column stays empty).
    """
    title = f"site {site}" if scoring else f"site {site} (scoring off: signals polled)"
    table = Table(title=title, title_justify="left", expand=True)
    for column in _COLUMNS:
        right = column in ("rank", "score", "reqs")
        table.add_column(column, justify="right" if right else "left")
    if overlay is None:
        table.add_row("-", "waiting for the first overlay", *([""] * (len(_COLUMNS) - 2)))
        return table
    counts = counts or {}
    for c in overlay.get("candidates", []):
        score = c.get("score")
        table.add_row(
            str(c.get("rank")),
            KIND_NOUNS.get(str(c.get("kind")), str(c.get("kind"))),
            str(c.get("name")),
            str(c.get("site")),
            str(c.get("cluster")),
            _SHORT.get(str(c.get("selection_tier")), str(c.get("selection_tier"))),
            _SHORT.get(str(c.get("admission_state")), str(c.get("admission_state"))),
            f"{score:.3f}" if isinstance(score, int | float) else "-",
            "yes" if c.get("fresh") else "no",
            str(counts.get(str(c.get("cluster")), "-")),
        )
    return table


def mesh_view(
    overlay_dirs: dict[str, Path], counts: dict[str, int] | None = None, *, scoring: bool = True
) -> Group:
    """A table per site, in site order."""
    return Group(
        *(site_table(s, read_overlay(d), counts, scoring=scoring) for s, d in overlay_dirs.items())
    )


async def budget_status(
    stores: Mapping[str, Path], network: str
) -> dict[str, list[dict[str, Any]]]:
    """Each site's ``status.budgetStatus[]``, read from its store (empty when unreadable)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for name, path in stores.items():
        found[name] = []
        with contextlib.suppress(GridError, OSError):
            store = await SqliteStore.open(path)
            try:
                obj = await store.get("GridNetwork", network)
            finally:
                await store.close()
            found[name] = list((obj.get("status") or {}).get("budgetStatus") or [])
    return found


def budget_table(per_site: dict[str, list[dict[str, Any]]]) -> Table:
    """Each tenant's spend, cap and ratio at every site; ``429`` marks an exhausted tenant."""
    table = Table(title="tenant budgets (spend USD / cap, ratio)", title_justify="left")
    table.add_column("tenant")
    for site in per_site:
        table.add_column(site, justify="right")
    tenants = sorted({str(i.get("tenantId")) for items in per_site.values() for i in items})
    for tenant in tenants:
        cells = []
        for items in per_site.values():
            item = next((i for i in items if i.get("tenantId") == tenant), None)
            if item is None:
                cells.append("-")
                continue
            ratio = float(item.get("spendRatio", 0))
            mark = " 429" if ratio >= 1 else ""
            cells.append(
                f"{float(item.get('spendUsd', 0)):.2f} / {float(item.get('capUsd', 0)):.2f}, "
                f"{ratio:.2f}{mark}"
            )
        table.add_row(tenant, *cells)
    return table
