"""Fixtures for the SWIM machine unit tests: a machine with a known peer table."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import Effect, Send
from grid.core.swim.machine import SwimMachine
from grid.core.swim.members import Member, MemberState
from grid.core.swim.messages import Ack, Ping
from grid.core.wire.codec import encoded_size

MachineFactory = Callable[..., tuple[SwimMachine, list[Effect]]]


def peer_address(index: int) -> str:
    """The address of peer `index` in these tests."""
    return f"10.0.0.{index}:7946"


@pytest.fixture
def make_machine() -> MachineFactory:
    """Build a joined machine `me` that already knows peers `p1`..`pN` alive."""

    def build(
        peers: int = 4,
        *,
        config: SwimConfig | None = None,
        seed: int = 1,
        seeds: tuple[str, ...] = (),
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
        effects = machine.join(seeds, 0.0)
        return machine, effects

    return build


def answer_challenges(machine: SwimMachine, effects: list[Effect], now: float) -> list[Effect]:
    """Answer, as the members they name, the challenges among `effects` (they prove themselves)."""
    out: list[Effect] = []
    for effect in effects:
        message = effect.message if isinstance(effect, Send) else None
        if isinstance(message, Ping) and message.target:
            out += machine.handle_packet(effect.address, Ack(message.seq, message.target), now)
    return out
