"""A fake datagram network with loss, delay, duplication, reordering and partitions.

Every random choice comes from the one `random.Random` the simulator owns, so a
seed reproduces a run exactly. Datagrams may be lost, delayed by a uniform
delay, duplicated and reordered (an extra delay for some packets). A partition
splits addresses into groups; packets between groups vanish. Streams model the
TCP anti-entropy connection: reliable and ordered, but only between reachable,
attached addresses.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from grid.testing.clock import FakeClock

Receiver = Callable[[str, Any], None]


@dataclass(frozen=True, slots=True)
class NetworkConditions:
    """How hostile the fake network is."""

    loss: float = 0.0
    """Probability that a datagram is dropped."""
    delay_min_s: float = 0.001
    """Shortest one-way delay, seconds."""
    delay_max_s: float = 0.010
    """Longest one-way delay (before reordering), seconds."""
    duplicate: float = 0.0
    """Probability that a delivered datagram is delivered twice."""
    reorder: float = 0.0
    """Probability that a datagram is held back by up to `reorder_delay_s` more."""
    reorder_delay_s: float = 0.050
    """The largest extra delay of a reordered datagram, seconds."""


@dataclass(slots=True)
class NetworkStats:
    """Counters of what the network did."""

    sent: int = 0
    delivered: int = 0
    lost: int = 0
    partitioned: int = 0
    duplicated: int = 0
    streams: int = 0
    streams_refused: int = 0


class FakeNetwork:
    """Datagrams and streams between attached addresses, in virtual time."""

    def __init__(
        self, clock: FakeClock, rng: random.Random, conditions: NetworkConditions | None = None
    ) -> None:
        self.clock = clock
        self.rng = rng
        self.conditions = conditions or NetworkConditions()
        self.stats = NetworkStats()
        self._receivers: dict[str, Receiver] = {}
        self._group: dict[str, int] = {}

    def attach(self, address: str, receiver: Receiver) -> None:
        """Deliver datagrams for `address` to `receiver(src, message)`."""
        self._receivers[address] = receiver

    def detach(self, address: str) -> None:
        """Stop delivering to `address` (a crashed or stopped node)."""
        self._receivers.pop(address, None)

    def partition(self, *groups: Collection[str]) -> None:
        """Split the network: only addresses in the same group can talk.

        Addresses listed in no group form one more, implicit group.
        """
        self._group = {}
        for index, group in enumerate(groups):
            for address in group:
                self._group[address] = index

    def heal(self) -> None:
        """Remove every partition."""
        self._group = {}

    def reachable(self, src: str, dst: str) -> bool:
        """Whether a packet from `src` can reach `dst` now."""
        group = self._group
        return group.get(src, -1) == group.get(dst, -1)

    def send(self, src: str, dst: str, message: Any) -> None:
        """Send one datagram, subject to the network's conditions."""
        stats = self.stats
        stats.sent += 1
        if self._group and not self.reachable(src, dst):
            stats.partitioned += 1
            return
        cond = self.conditions
        rng = self.rng
        if cond.loss and rng.random() < cond.loss:
            stats.lost += 1
            return
        copies = 2 if cond.duplicate and rng.random() < cond.duplicate else 1
        stats.duplicated += copies - 1
        for _ in range(copies):
            delay = rng.uniform(cond.delay_min_s, cond.delay_max_s)
            if cond.reorder and rng.random() < cond.reorder:
                delay += rng.uniform(0.0, cond.reorder_delay_s)
            self.clock.call_later(delay, self._arrive, src, dst, message)

    def _arrive(self, src: str, dst: str, message: Any) -> None:
        receiver = self._receivers.get(dst)
        if receiver is None:
            self.stats.lost += 1
            return
        self.stats.delivered += 1
        receiver(src, message)

    def stream(self, src: str, dst: str, deliver: Callable[[], None]) -> bool:
        """Open a reliable stream and run `deliver` after one delay.

        Returns False, like a refused connection, when `dst` is not attached or
        not reachable from `src`.
        """
        if dst not in self._receivers or (self._group and not self.reachable(src, dst)):
            self.stats.streams_refused += 1
            return False
        self.stats.streams += 1
        cond = self.conditions
        self.clock.call_later(self.rng.uniform(cond.delay_min_s, cond.delay_max_s), deliver)
        return True
