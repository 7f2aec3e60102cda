"""Per-agent token buckets: one budget per agent, shared by both routes.

Seed 004: both routes share per-agent rate limiting, and inventory does not
grant a second resource budget. So there is exactly one bucket per agent ID and
each admitted request, whatever its route, takes one token. The buckets take
``now`` (monotonic seconds) from the caller and never read a clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TokenBucket:
    """A classic token bucket: ``rate`` tokens per second up to ``burst`` tokens."""

    rate: float
    burst: float
    tokens: float
    updated: float

    def refill(self, now: float) -> None:
        """Add the tokens earned since the last update (time never runs backwards here)."""
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def take(self, now: float, cost: float = 1.0) -> float:
        """Take ``cost`` tokens; return 0 on success, else the seconds until they exist."""
        self.refill(now)
        if self.tokens >= cost:
            self.tokens -= cost
            return 0.0
        return (cost - self.tokens) / self.rate

    def is_full(self, now: float) -> bool:
        """True when the bucket is back to its burst (so forgetting it changes nothing)."""
        self.refill(now)
        return self.tokens >= self.burst


class AgentBuckets:
    """One token bucket per agent ID, created full on first use.

    Buckets that have refilled completely carry no information, so `prune`
    drops them; memory stays bounded by the agents active in the last
    ``burst / rate`` seconds (and only rostered agents ever reach this step).
    """

    def __init__(self, rate: float, burst: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, TokenBucket] = {}

    def take(self, agent_id: str, now: float, cost: float = 1.0) -> float:
        """Take from the agent's bucket; 0 on success, else the retry delay in seconds."""
        bucket = self._buckets.get(agent_id)
        if bucket is None:
            bucket = TokenBucket(self.rate, self.burst, self.burst, now)
            self._buckets[agent_id] = bucket
        return bucket.take(now, cost)

    def prune(self, now: float) -> int:
        """Forget full buckets; return how many were dropped."""
        full = [agent for agent, bucket in self._buckets.items() if bucket.is_full(now)]
        for agent in full:
            del self._buckets[agent]
        return len(full)

    def __len__(self) -> int:
        return len(self._buckets)
