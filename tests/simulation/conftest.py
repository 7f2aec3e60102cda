"""Seeds for the deterministic SWIM simulations, reported on failure.

Each simulation test takes `sim_seed`: by default a stable value derived from
the test's id (so CI runs are reproducible), or the value of GRID_SIM_SEED to
replay a failure or explore other seeds. A failing test's report carries a
"simulation seed" section with the exact command-line override.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Generator

import pytest

SEED_ENV = "GRID_SIM_SEED"
_SEED = pytest.StashKey[int]()


@pytest.fixture
def sim_seed(request: pytest.FixtureRequest) -> int:
    """The seed of this test's simulation (GRID_SIM_SEED overrides it)."""
    override = os.environ.get(SEED_ENV)
    seed = int(override) if override else zlib.crc32(request.node.nodeid.encode())
    request.node.stash[_SEED] = seed
    return seed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    """Attach the simulation seed to the report of a failing test."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    seed = item.stash.get(_SEED, None)
    if seed is not None and report.failed:
        report.sections.append(
            ("simulation seed", f"seed={seed}  (replay: {SEED_ENV}={seed} pytest {item.nodeid})")
        )
