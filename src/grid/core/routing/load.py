"""The load estimate that ``leastLoaded`` compares (SPEC-DECISIONS §14).

A candidate's estimate starts from this gateway's own requests in flight to
it: counted when an attempt starts and uncounted when its answer ends
(relayed, streamed to the end, broken off or failed). Where the gateway holds
the provider's queue signals (under poll it pulls them), it adds the queue the
other gateways put there: the reported waiting and running requests less this
gateway's own in-flight count when the report was taken up, never below 0. So
several gateways sharing providers see each other's load, seconds old, on top
of their own, current.

Pure and keyed by candidate ``stable_id``, so counts survive a snapshot swap.
"""

from __future__ import annotations

from collections.abc import Container, Mapping

__all__ = ["LoadBook"]


class LoadBook:
    """In-flight counts per candidate, and the queue other gateways put there."""

    __slots__ = ("in_flight", "others")

    def __init__(self) -> None:
        self.in_flight: dict[str, int] = {}
        self.others: dict[str, float] = {}

    def start(self, stable_id: str) -> None:
        """An attempt to the candidate begins."""
        in_flight = self.in_flight
        in_flight[stable_id] = in_flight.get(stable_id, 0) + 1

    def end(self, stable_id: str) -> None:
        """An attempt's answer ended (or the attempt failed)."""
        in_flight = self.in_flight
        left = in_flight.get(stable_id, 0) - 1
        if left > 0:
            in_flight[stable_id] = left
        else:
            in_flight.pop(stable_id, None)

    def estimate(self, stable_id: str) -> float:
        """Own in-flight requests plus the others' reported queue."""
        return self.in_flight.get(stable_id, 0) + self.others.get(stable_id, 0.0)

    def take_report(self, reported: Mapping[str, float]) -> None:
        """New reports of waiting+running requests per candidate replace the old ones.

        A candidate without a report has no others' queue added.
        """
        own = self.in_flight
        self.others = {
            stable_id: max(0.0, float(queued) - own.get(stable_id, 0))
            for stable_id, queued in reported.items()
        }

    def forget(self, keep: Container[str]) -> None:
        """Drop reports of candidates no longer routed; in-flight counts end by themselves."""
        self.others = {k: v for k, v in self.others.items() if k in keep}
