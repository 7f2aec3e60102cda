"""Fixtures for the SWIM machine unit tests: a machine with a known peer table."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import Effect
from grid.core.swim.machine import SwimMachine
from grid.core.swim.members import Member, MemberState
from grid.core.wire.codec import encoded_size

MachineFactory = Callable[..., tuple[SwimMachine, list[Effect]]]


def peer_address(index: int) -> str:
    """The address of peer `index` in these tests."""
    return f"10.0.0.{index}:7946"


@pytest.fixture
def make_machine() -> MachineFactory:
    """Build a joined machine `me` that already knows peers `p1`..`pN` alive."""

    def build(
        peers: int = 4, *, config: SwimConfig | None = None, seed: int = 1
    ) -> tuple[SwimMachine, list[Effect]]:
        machine = SwimMachine(
            "me",
            "10.0.0.254:7946",
            rng=random.Random(seed),
            size_of=encoded_size,
            config=config or SwimConfig(),
        )
        table = {
            f"p{i}": Member(f"p{i}", peer_address(i), 0, MemberState.ALIVE)
            for i in range(1, peers + 1)
        }
        machine.restore(table)
        effects = machine.join((), 0.0)
        return machine, effects

    return build
