"""The last minute's selections of a site's gateways, from their cumulative counters.

Each gateway counts ``grid_gateway_selections_total{cluster, group}`` (§14): the
requests whose first attempt selection sent to a cluster, by selection group.
The operator scrapes those counters (`grid.operator.gateway_scrape`); the live
view's scoring panel shows each candidate's share of the selections of the last
`WINDOW_S`. A `SelectionWindow` holds one gateway's scrapes and answers how
much each counter grew within the window:

* the growth of a key is its value now less its value at the window's start
  (the newest scrape at or before ``now - WINDOW_S``, else the first one
  held): counts from before the first scrape are never attributed to the
  window, so a freshly started operator shows growth from its second scrape;
* a key that is absent at the start counts whole (the gateway exports a
  pair only once it has selected it);
* a counter that went down restarted with its gateway, and counts from 0;
* a gateway that has not answered within the window counts nothing.

Pure: the caller passes the time (``now_s``, any monotonic clock).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

__all__ = ["WINDOW_S", "SelectionKey", "SelectionWindow", "recent_total"]

WINDOW_S = 60.0
"""How far back the scoring panel's shares look, in seconds (§14: the last minute)."""

SelectionKey = tuple[str, int]
"""(cluster, selection group): the labels of ``grid_gateway_selections_total``."""


class SelectionWindow:
    """One gateway's scrapes of its selection counters, for their growth over `WINDOW_S`."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._times: list[float] = []
        self._counts: list[dict[SelectionKey, int]] = []

    def observe(self, now_s: float, counts: Mapping[SelectionKey, int]) -> None:
        """Take one scrape; scrapes no longer needed for the window are dropped."""
        if self._times and now_s < self._times[-1]:
            return  # a clock that went back: keep the history ordered
        self._times.append(now_s)
        self._counts.append(dict(counts))
        start = bisect.bisect_right(self._times, now_s - self.window_s) - 1
        if start > 0:
            del self._times[:start]
            del self._counts[:start]

    def recent(self, now_s: float) -> dict[SelectionKey, int]:
        """How much each counter grew within the window ending at ``now_s``."""
        if not self._times or self._times[-1] < now_s - self.window_s:
            return {}
        start = max(0, bisect.bisect_right(self._times, now_s - self.window_s) - 1)
        base, last = self._counts[start], self._counts[-1]
        grown: dict[SelectionKey, int] = {}
        for key, value in last.items():
            before = base.get(key, 0)
            delta = value - before if value >= before else value
            if delta > 0:
                grown[key] = delta
        return grown


def recent_total(windows: Iterable[SelectionWindow], now_s: float) -> dict[SelectionKey, int]:
    """The growth of every key summed over ``windows`` (the site's gateways)."""
    total: dict[SelectionKey, int] = {}
    for window in windows:
        for key, n in window.recent(now_s).items():
            total[key] = total.get(key, 0) + n
    return dict(sorted(total.items()))
