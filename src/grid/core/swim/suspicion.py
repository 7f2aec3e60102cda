"""Lifeguard's dynamic suspicion timeout.

When a member is first suspected, its timer starts at the maximum timeout and
shrinks toward the minimum as independent confirmations (suspicions from other
accusers) arrive, following memberlist's formula::

    timeout(C) = max(min, max - (max - min) * log(C + 1) / log(K + 1))

where C is the number of confirmations so far and K the number expected. The
accuser that started the suspicion does not count as a confirmation. A lone,
possibly unhealthy accuser thus gives the suspect the most time to refute,
while many agreeing accusers shorten detection toward the minimum. With K < 1
(too few members to expect confirmations) the timer starts at the minimum.
"""

from __future__ import annotations

import math


def suspicion_timeout_s(confirmations: int, k: int, min_s: float, max_s: float) -> float:
    """The total suspicion timeout after `confirmations` of `k` expected ones."""
    if k < 1:
        return min_s
    fraction = math.log(confirmations + 1) / math.log(k + 1)
    return max(min_s, max_s - (max_s - min_s) * fraction)


class Suspicion:
    """One suspected member's timer state: who accused it and when it expires."""

    __slots__ = (
        "accusers",
        "confirmations",
        "deadline",
        "incarnation",
        "k",
        "max_s",
        "min_s",
        "started_at",
    )

    def __init__(
        self,
        accuser: str,
        incarnation: int,
        k: int,
        min_s: float,
        max_s: float,
        started_at: float,
    ) -> None:
        self.accusers = {accuser}
        self.incarnation = incarnation
        self.k = k
        self.min_s = min_s
        self.max_s = max_s
        self.started_at = started_at
        self.confirmations = 0
        self.deadline = started_at + suspicion_timeout_s(0, k, min_s, max_s)

    def confirm(self, accuser: str) -> bool:
        """Count an independent confirmation; True when it was new.

        A new confirmation moves the deadline earlier. Confirmations beyond K,
        and repeats from a known accuser, change nothing.
        """
        if self.confirmations >= self.k or accuser in self.accusers:
            return False
        self.accusers.add(accuser)
        self.confirmations += 1
        timeout = suspicion_timeout_s(self.confirmations, self.k, self.min_s, self.max_s)
        self.deadline = self.started_at + timeout
        return True
