"""Fractional-cent costs add up without drift: the ledger against exact Decimal arithmetic."""

from __future__ import annotations

import random
from decimal import ROUND_FLOOR, Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.metering.budgets import Ledger, Price

REQUESTS = 100_000
SCRAPE_EVERY = 1_000

costs = st.decimals(min_value=Decimal("0.001"), max_value=Decimal(100), places=3)


@settings(max_examples=5, deadline=None)
@given(
    input_cost=costs,
    output_cost=costs,
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_costs_in_fractions_of_a_cent_add_up_over_100000_requests(
    input_cost: Decimal, output_cost: Decimal, seed: int
) -> None:
    rng = random.Random(seed)
    price = Price.of(float(input_cost), float(output_cost))
    prices = {"c": price}
    ledger = Ledger()
    counters = {("t", "c", "input"): 0, ("t", "c", "output"): 0}
    exact = Decimal(0)
    for i in range(1, REQUESTS + 1):
        prompt, completion = rng.randint(1, 4000), rng.randint(0, 1000)
        counters[("t", "c", "input")] += prompt
        counters[("t", "c", "output")] += completion
        # The reference: each request priced on its own, summed exactly.
        exact += (prompt * input_cost + completion * output_cost) * 100 / 1_000_000
        if i % SCRAPE_EVERY == 0 or i == REQUESTS:
            ledger = ledger.observe("gw", counters, prices)
    whole = int(exact.to_integral_value(rounding=ROUND_FLOOR))
    assert ledger.cents.get("t", 0) == whole
    assert ledger.remainder["t"] == exact - whole
