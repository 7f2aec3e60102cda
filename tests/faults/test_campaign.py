"""The short fault campaign: three real sites, faults one after another, invariants after each.

`grid.testing.fault_steps` injects, on a `FaultMesh` (operators, gateways and
mock providers as real processes, SWIM through a seeded fault proxy): a
partition of one site and its healing, 20% and 50% datagram loss, SIGKILL of
an operator mid-render and of a gateway mid-request, a store refusing writes,
and a wall clock skewed by +30 s and -30 s. The seed is printed (and may be
set with ``GRID_FAULT_SEED``) so a failure replays. ``bench/faults.py`` runs
the long form.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import aiohttp
import pytest

from grid.testing.fault_campaign import SHORT, Campaign
from grid.testing.fault_mesh import FAKETIME_LIB, FaultMesh
from grid.testing.fault_steps import run_faults

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]


async def test_every_invariant_holds_after_every_fault(tmp_path: Path) -> None:
    assert FAKETIME_LIB.exists(), "libfaketime is missing: make system-deps installs it"
    seed = int(os.environ.get("GRID_FAULT_SEED") or random.SystemRandom().randrange(2**32))
    print(f"fault campaign seed {seed} (GRID_FAULT_SEED={seed} replays it)")
    fm = FaultMesh(tmp_path / "mesh", ["east", "west", "central"], seed)
    try:
        await fm.start()
        async with aiohttp.ClientSession() as http:
            campaign = Campaign(fm, http, SHORT)
            try:
                await campaign.open()
                results = await run_faults(campaign, lambda r: print(r))
            finally:
                await campaign.close()
        spent = campaign.expected_cents()
        assert spent > 0, "no site's spend reached a cent: the budget checks were vacuous"
        assert fm.signals_proxy is not None
        polls = fm.signals_proxy.piped
        print(f"signal polls piped between sites: {polls}")
        # Every site polled every other through the proxy, so a partition cut the polls too.
        assert {pair for pair, n in polls.items() if n} == {
            (a, b) for a in fm.sites for b in fm.sites if a != b
        }
    finally:
        await fm.stop()
    assert len(results) == 8
    failed = [(r.fault, r.invariants, r.notes) for r in results if not r.held]
    assert not failed, f"seed {seed}: {failed}"
    partition = results[0]
    assert partition.detect_s is not None, "the partition was never seen"
