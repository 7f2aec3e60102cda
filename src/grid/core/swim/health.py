"""Lifeguard's local health multiplier (LHM).

A member that misses acks it should have received, or has to refute suspicion
of itself, is probably the slow one: its own CPU or network is struggling. The
LHM counts that evidence and scales the member's probe interval and probe
timeout by (LHM + 1), so an unhealthy member probes less aggressively and gives
others more time before accusing them. Successful probes decay it.
"""

from __future__ import annotations


class LocalHealth:
    """A saturating counter in [0, max_multiplier - 1] that scales timeouts."""

    __slots__ = ("_max", "score")

    def __init__(self, max_multiplier: int) -> None:
        self._max = max_multiplier
        self.score = 0

    def apply(self, delta: int) -> None:
        """Move the score by `delta`, clamped to its range."""
        self.score = min(self._max - 1, max(0, self.score + delta))

    @property
    def multiplier(self) -> int:
        """The factor (LHM + 1) applied to probe interval and timeout."""
        return self.score + 1

    def scale(self, seconds: float) -> float:
        """`seconds` scaled by the current multiplier."""
        return seconds * (self.score + 1)
