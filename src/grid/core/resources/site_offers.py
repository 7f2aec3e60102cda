"""What a site offers, as its GridSite's ``status.capabilities`` shows it.

One entry per model the site's provider records serve: the union of the
capabilities its providers declare for it, the largest context window any
declares, and the providers serving it, all sorted so that the same records
always give the same status (and an unchanged offer writes nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from grid.core.crdt.record import ProviderRecord


def site_capabilities(records: Iterable[ProviderRecord]) -> list[dict[str, Any]]:
    """The ``status.capabilities`` entries of the site whose records these are."""
    caps: dict[str, set[str]] = {}
    windows: dict[str, int] = {}
    providers: dict[str, set[str]] = {}
    for record in records:
        for model in record.models:
            info = record.info(model)
            caps.setdefault(model, set()).update(info.capabilities)
            providers.setdefault(model, set()).add(record.name)
            if info.context_window is not None:
                windows[model] = max(windows.get(model, 0), info.context_window)
    entries = []
    for model in sorted(caps):
        entry: dict[str, Any] = {
            "model": model,
            "capabilities": sorted(caps[model]),
            "providers": sorted(providers[model]),
        }
        if model in windows:
            entry["contextWindow"] = windows[model]
        entries.append(entry)
    return entries
