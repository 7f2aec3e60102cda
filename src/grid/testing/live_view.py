"""Live views of a simulated mesh: what ``/ui/`` would show for every simulated node.

`simulated_view` builds each running node's `site_view` from its machine (the
member table and its own incarnation) and the simulator's observations (the
activity), then merges them as ``grid demo`` merges its sites: the same pure
assembly the operator serves, fed by the deterministic simulator, so a
64-member page can be tested without 64 processes.
"""

from __future__ import annotations

import datetime as dt
import math

from grid.core.live.view import SiteInputs, View, merge_views, site_view
from grid.core.overlay import format_timestamp
from grid.core.swim.config import SwimConfig
from grid.testing.simulator import Simulator

EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
"""Wall-clock time of the simulator's virtual time 0."""


def _at(seconds: float) -> str:
    """A virtual time as an RFC 3339 stamp."""
    return format_timestamp(EPOCH + dt.timedelta(seconds=seconds))


def simulated_view(sim: Simulator) -> View:
    """The merged live view of every running node of ``sim``."""
    views = []
    for node in sim.running():
        activity = [
            {
                "at": _at(o.at),
                "observer": o.observer,
                "member": o.member,
                "kind": o.kind.value,
                "incarnation": o.incarnation,
            }
            for o in sim.observations
            if o.observer == node.id
        ]
        inputs = SiteInputs(
            observer=node.id,
            generated_at=_at(sim.now),
            incarnation=node.machine.incarnation,
            members=node.machine.members(),
            activity=list(reversed(activity)),
        )
        views.append(site_view(inputs))
    down = [n.id for n in sim.nodes.values() if not n.up]
    return merge_views(views, _at(sim.now), down)


def detection_bound_s(config: SwimConfig, members: int) -> float:
    """Seconds from a crash until every survivor of ``members`` holds it dead (the SWIM bound).

    Some survivor probes the crashed member within 2(n-1) probe intervals and
    suspects it one interval later; the suspicion runs out within the maximum
    suspicion timeout; the verdict spreads in 2·⌈log2 n⌉ gossip intervals (the
    bounds tests/simulation/test_failure_detection.py asserts).
    """
    first_suspicion = (2 * (members - 1) + 1) * config.probe_interval_s
    spread = 2 * math.ceil(math.log2(max(2, members))) * config.gossip_interval_s
    return first_suspicion + config.suspicion_max_s + spread
