"""An item too large for a datagram reaches a lossy mesh within seconds, not at the
next periodic push-pull (30 s); without its rounds it would not."""

from __future__ import annotations

import pytest

from grid.core.swim.config import SwimConfig
from grid.core.swim.messages import BroadcastItem, Lane
from grid.testing.network import NetworkConditions
from grid.testing.simulator import Simulator

BIG = b"x" * 4000


def _spread_s(sim_seed: int, config: SwimConfig) -> float | None:
    sim = Simulator(sim_seed, config=config, conditions=NetworkConditions(loss=0.2))
    nodes = [sim.add_node() for _ in range(24)]
    sim.join(nodes[0], ())
    for node in nodes[1:]:
        sim.run_for(0.1)
        sim.join(node, [nodes[0]])
    sim.run_for(40.0)  # settled: the join exchanges and one periodic push-pull are over
    origin = nodes[5]
    item = BroadcastItem(Lane.STATE, origin.id, 10**9, BIG)
    sim.apply(origin, origin.machine.publish(item, sim.now))
    started = sim.now
    took = sim.run_until(
        lambda: all(item in n.machine.known_items() for n in nodes),
        timeout_s=25.0,
        check_every_s=0.1,
    )
    return None if took is None else took - started


def test_an_oversize_item_reaches_a_lossy_mesh_of_24_within_seconds(sim_seed: int) -> None:
    took = _spread_s(sim_seed, SwimConfig())
    assert took is not None and took < 6.0, took


@pytest.mark.parametrize("interval_s", [0.0])
def test_without_its_rounds_it_waits_for_the_periodic_push_pull(
    sim_seed: int, interval_s: float
) -> None:
    took = _spread_s(sim_seed, SwimConfig(oversize_push_pull_interval_s=interval_s))
    assert took is None or took > 6.0, took
