"""Three gateways sharing four providers, with the others' queue reported once a second.

The virtual-time model of `grid.testing.selection_sim` (printed seed) runs
`leastLoaded` at each gateway: Poisson arrivals at 80% of the providers'
capacity, each provider 4 slots of about 0.5 s with a FIFO queue behind them,
and every second a report of each provider's waiting and running requests
reaches every gateway, as signals polls do. Taken whole, the seconds-old report
sends every gateway away from the same provider and then onto it together;
averaged (`LoadSettings.report_decay_s`), it does not.
"""

from __future__ import annotations

import pytest

from grid.core.routing.load import LoadSettings
from grid.testing.selection_sim import Degrade, Model, p99, simulate


def _mean_p99(model: Model, strategy: str, seeds: range) -> float:
    return sum(p99(simulate(model, strategy, s)) for s in seeds) / len(seeds)


def test_averaged_reports_keep_three_gateways_from_herding() -> None:
    seed = 20261206
    print(f"seed {seed}")
    seeds = range(seed, seed + 4)
    whole = _mean_p99(
        Model(gateways=3, settings=LoadSettings(report_decay_s=0.0)), "leastLoaded", seeds
    )
    averaged = _mean_p99(Model(gateways=3), "leastLoaded", seeds)
    print(f"p99 with reports taken whole {whole:.3f} s, averaged {averaged:.3f} s")
    # 4 slots of 0.5 s: a request that never waits takes 0.4 to 0.6 s.
    assert averaged < 0.85 * whole
    assert averaged < 1.3


def test_the_oracle_bounds_every_strategy_and_load_awareness_beats_blind_rules() -> None:
    seed = 20261207
    print(f"seed {seed}")
    seeds = range(seed, seed + 4)
    slowed = Model(degrade=Degrade(0, 3.0, 10.0), duration_s=30.0)
    figures = {s: _mean_p99(slowed, s, seeds) for s in ("oracle", "roundRobin", "leastLoaded")}
    print(figures)
    assert figures["oracle"] < figures["leastLoaded"] < figures["roundRobin"] / 3


def test_a_model_refuses_an_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="strategy must be one of"):
        simulate(Model(duration_s=1.0), "fastest", 1)
