"""Tenant budgets under a partition, in simulated time with a printed seed.

Six sites gossip their G-Counter slots over the simulated SWIM mesh. Each has
a gateway (a cumulative token counter per tenant) and the site's `Ledger`,
which prices the counter into the site's own slot exactly as the operator does
(`grid.core.metering.budgets`), and enforces softly: a site refuses a tenant whose ratio
in its own view is 1. The mesh splits in two for a while, both sides keep
serving, then it heals. Throughout, every site's view of a tenant is at most
the true spend (the sum of every site's own slot), no site refuses a tenant
whose true spend is under its cap, and after healing every site agrees.
"""

from __future__ import annotations

import random

from grid.core.crdt.replica import GridState
from grid.core.metering.budgets import CounterKey, Ledger, Price, raise_own_slots, ratios
from grid.testing.simulator import SimNode, Simulator

CAPS = {"small": 0.40, "large": 1000.0}
"""USD: the small tenant runs out during the partition, the large never does."""
PRICE = Price.of(2.0, 6.0)
SITES = 6


class Site:
    """One site: its gateway's counters, its ledger and its replica."""

    def __init__(self, sim: Simulator, node: SimNode) -> None:
        self.sim, self.node = sim, node
        self.replica: GridState = sim.attach_replica(node)
        self.counters: dict[CounterKey, int] = {}
        self.ledger = Ledger()
        self.refused = 0

    def view(self) -> dict[str, int]:
        return {t: self.replica.spend(t).value for t in CAPS}

    def exhausted(self) -> set[str]:
        return {t for t, r in ratios(CAPS, self.view()).items() if r >= 1}

    def serve(self, tenant: str, prompt: int, completion: int) -> bool:
        if tenant in self.exhausted():
            self.refused += 1
            return False
        cluster = f"c-{self.node.id}"
        for direction, tokens in (("input", prompt), ("output", completion)):
            key: CounterKey = (tenant, cluster, direction)  # type: ignore[assignment]
            self.counters[key] = self.counters.get(key, 0) + tokens
        return True

    def scrape(self) -> None:
        """The operator's scrape: price, raise the own slot, gossip it."""
        self.ledger = self.ledger.observe("gw", self.counters, {f"c-{self.node.id}": PRICE})
        snapshot = raise_own_slots(self.replica.local, self.ledger.cents)
        if snapshot != self.replica.local:
            self.sim.publish_snapshot(self.node, snapshot)


def _truth(sites: list[Site]) -> dict[str, int]:
    return {t: sum(s.ledger.cents.get(t, 0) for s in sites) for t in CAPS}


def _check(sites: list[Site], rng: random.Random) -> None:
    truth = _truth(sites)
    for site in sites:
        for tenant, seen in site.view().items():
            assert seen <= truth[tenant], (site.node.id, tenant, seen, truth)
        tenant = rng.choice(sorted(CAPS))
        under_cap = truth[tenant] < CAPS[tenant] * 100
        served = site.serve(tenant, rng.randint(500, 8000), rng.randint(50, 800))
        assert served or not under_cap, f"{site.node.id} refused {tenant} under its cap"


def test_partition_sides_see_lower_bounds_never_refuse_under_cap_and_agree_after_healing(
    sim_seed: int,
) -> None:
    print(f"budget partition simulation seed={sim_seed}")
    rng = random.Random(sim_seed)
    sim = Simulator(sim_seed)
    nodes = [sim.add_node() for _ in range(SITES)]
    sites = [Site(sim, n) for n in nodes]
    sim.join(nodes[0], ())
    for node in nodes[1:]:
        sim.run_for(0.2)
        sim.join(node, [nodes[0]])
    assert sim.run_until(sim.full_membership, timeout_s=60, check_every_s=1) is not None

    side_a, side_b = nodes[: SITES // 2], nodes[SITES // 2 :]
    sim.network.partition([n.address for n in side_a], [n.address for n in side_b])
    for _tick in range(120):
        for _ in range(3):
            _check(sites, rng)
        for site in sites:
            site.scrape()
        sim.run_for(1.0)
    truth = _truth(sites)
    assert truth["small"] >= CAPS["small"] * 100, "the small tenant never ran out"
    assert any(s.refused for s in sites), "no site ever enforced the cap"
    lagging = [s for s in sites if s.view() != truth]
    assert lagging, "the partition never hid any spend"

    sim.network.heal()
    healed_at = sim.now

    def agreed() -> bool:
        for site in sites:
            site.scrape()
        return all(s.view() == _truth(sites) for s in sites)

    done = sim.run_until(agreed, timeout_s=120, check_every_s=1)
    assert done is not None, f"sites did not agree after healing: {sim!r}"
    print(f"healed: every site agrees on {_truth(sites)} cents after {done - healed_at:.1f}s")
    overrun = _truth(sites)["small"] / (CAPS["small"] * 100)
    print(f"the small tenant's spend is {overrun:.2f} x its cap (soft enforcement under partition)")
