"""The live view's event stream: what changed between two views, one event per section.

``/ui/events`` sends, at most every 250 ms, one JSON event per section that
changed since the last one sent; changes in between coalesce into it. Each
event has a ``type`` among `EVENT_TYPES` and carries the section's fields whole,
so a page applies it by replacing those fields of its copy of the view.
"""

from __future__ import annotations

from typing import Any

from grid.core.live.view import View

EVENT_SECTIONS: dict[str, tuple[str, ...]] = {
    "members": ("sites", "unreachable", "members", "activity", "transport"),
    "lanes": ("lanes",),
    "ranking": ("ranking",),
    "traffic": ("traffic",),
    "budgets": ("budgets",),
    "modes": ("modes",),
}
"""Event type → the view fields it carries (SPEC-DECISIONS §13)."""
EVENT_TYPES = tuple(EVENT_SECTIONS)

EVENT_INTERVAL_S = 0.25
"""Least time between two batches of events on one stream (§13: at most every 250 ms).
Shorter shows changes sooner; every batch costs each viewer a view assembly."""


def changed_events(previous: View | None, current: View) -> list[dict[str, Any]]:
    """The events that bring a page holding ``previous`` to ``current`` (all when None)."""
    events = []
    for kind, fields in EVENT_SECTIONS.items():
        if previous is not None and all(previous.get(f) == current.get(f) for f in fields):
            continue
        event: dict[str, Any] = {"type": kind, "generated_at": current["generated_at"]}
        event.update({f: current.get(f) for f in fields})
        events.append(event)
    return events
