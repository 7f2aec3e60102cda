"""The demo operators' paces: how often they refresh, probe and render.

The demo runs three sites on one machine, so its paces are chosen for what a
person watching it sees and for what the operators cost at rest; each value
says why. `operator_pace_args` is the flags `DemoMesh` passes every operator.
"""

from __future__ import annotations

RECORD_REFRESH_S = 3.0
"""The operators' ``--record-refresh``: how long an own record that no check changed
goes before it is sent again with a new sample time. A third of the demo's
staleCandidateTtlSeconds (10 s), so a record is re-sent three times before a peer
would evict it; faster only makes every site render again for a new sample time."""
SITE_PROBE_INTERVAL_S = 1.0
"""The operators' ``--site-probe-interval``: each round probes every peer's egress
with an mTLS handshake (resumed, still the largest cost of a site at rest). At 1 s a
killed site is Unreachable at the others within about two seconds."""
RENDER_GAP_S = 1.0
"""The operators' ``--render-gap``: the least time between two render rounds. The
demo's bursty providers move their load on every 1 s scrape, and each site hears of
them and of the record refreshes at their own moments; with a gap of a scrape
interval those changes render together about once a second instead of three times."""
BUDGET_SCRAPE_INTERVAL_S = 0.5
"""The operators' ``--budget-scrape-interval``: how often each reads its gateway's
tenant counters to price the tenants' spend."""


def operator_pace_args() -> list[str]:
    """The pace flags of every demo operator."""
    return [
        "--record-refresh",
        str(RECORD_REFRESH_S),
        "--site-probe-interval",
        str(SITE_PROBE_INTERVAL_S),
        "--render-gap",
        str(RENDER_GAP_S),
        "--budget-scrape-interval",
        str(BUDGET_SCRAPE_INTERVAL_S),
    ]
