"""The load estimate that ``leastLoaded`` compares (SPEC-DECISIONS §14).

The estimate starts from the queue this gateway sees at a candidate: its own
requests in flight there, counted when an attempt starts and uncounted when
its answer ends (relayed, streamed to the end, broken off or failed). Where
the gateway holds the provider's queue signals (under poll it pulls them), it
adds the queue the other gateways put there: the reported waiting and running
requests less this gateway's own in-flight count when the report was taken
up, never below 0, averaged over reports with time constant
``report_decay_s``. A report is seconds old, several service times at an
inference provider: the queue it caught has drained and refilled since, so
taken whole it sends every gateway away from the same provider, then onto it
together. Averaged, it adds the load the other gateways keep putting on each
provider, on top of this gateway's own, current.

A queue of requests is not yet a wait: four requests at a provider that
answers in a second cost more than four at one that answers in 0.3 s. So the
estimate is the expected time of one more request there,
``(queue + 1) x latency``, where ``latency`` is a peak-sensitive moving
average of how long this gateway waited for the candidate's answers (the
peak EWMA of Finagle and linkerd): a slower answer than the average moves it
at once, faster ones pull it down with time constant ``decay_s``. A provider
that slows down, or that other gateways load, shows it in its answers to
this gateway before any report arrives. A candidate with no answer yet is
costed at the mean of the averages this gateway holds (1 when it holds none),
so it competes on its queue alone. Latencies below ``floor_s`` count as the
floor: at that scale they measure connection setup and scheduling, so the
queue decides.

Pure and keyed by candidate ``stable_id``, so the figures survive a snapshot
swap; the clock is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping
from dataclasses import dataclass

from grid.errors import ValidationError

__all__ = ["LoadBook", "LoadSettings"]


@dataclass(frozen=True)
class LoadSettings:
    """How the latency average moves."""

    decay_s: float = 5.0
    """Time constant of the average: a sample ``decay_s`` after the last one
    moves it by 63% of the way (a slower one moves it all the way at once)."""

    report_decay_s: float = 10.0
    """Time constant of the average of the others' reported queue (0: each report
    taken whole). The first report of a candidate is taken whole."""
    floor_s: float = 0.025
    """The least latency the estimate charges. Answers faster than this differ by
    connection setup and scheduling, not by provider speed, so below it the
    queue alone decides: one slow first answer (a new connection) must not
    outweigh a queue of twelve at a provider answering in a millisecond."""

    def __post_init__(self) -> None:
        if not 0 < self.decay_s <= 3600:
            raise ValidationError("must be in (0, 3600] seconds", path="decay_s")
        if not 0 <= self.report_decay_s <= 3600:
            raise ValidationError("must be in [0, 3600] seconds", path="report_decay_s")
        if not 0 <= self.floor_s <= 60:
            raise ValidationError("must be in [0, 60] seconds", path="floor_s")


class LoadBook:
    """In-flight counts, the queue other gateways put there, and answer latencies."""

    __slots__ = ("_latency", "_reported_at", "_sum", "in_flight", "others", "settings")

    def __init__(self, settings: LoadSettings | None = None) -> None:
        self.settings = settings or LoadSettings()
        self.in_flight: dict[str, int] = {}
        self.others: dict[str, float] = {}
        self._latency: dict[str, tuple[float, float]] = {}
        """Per candidate: (average seconds, monotonic time of the last sample)."""
        self._sum = 0.0
        """The sum of the averages: their mean costs a candidate never answered."""
        self._reported_at: float | None = None
        """Monotonic time of the last report taken up."""

    def start(self, stable_id: str, now: float = 0.0) -> float:
        """An attempt to the candidate begins; returns its start, for `answered`."""
        in_flight = self.in_flight
        in_flight[stable_id] = in_flight.get(stable_id, 0) + 1
        return now

    def answered(self, stable_id: str, started: float, now: float) -> None:
        """The attempt begun at ``started`` got its answer at ``now``: one latency sample."""
        sample = max(0.0, now - started)
        held = self._latency.get(stable_id)
        if held is None or sample >= held[0]:
            average = sample  # the peak: a slower answer counts at once
        else:
            previous, at = held
            keep = math.exp(-max(0.0, now - at) / self.settings.decay_s)
            average = sample + (previous - sample) * keep
        self._sum += average - (0.0 if held is None else held[0])
        self._latency[stable_id] = (average, now)

    def end(self, stable_id: str) -> None:
        """An attempt's answer ended (or the attempt failed)."""
        in_flight = self.in_flight
        left = in_flight.get(stable_id, 0) - 1
        if left > 0:
            in_flight[stable_id] = left
        else:
            in_flight.pop(stable_id, None)

    def queue(self, stable_id: str) -> float:
        """Own in-flight requests plus the others' reported queue."""
        return self.in_flight.get(stable_id, 0) + self.others.get(stable_id, 0.0)

    def latency(self, stable_id: str) -> float:
        """The candidate's latency average, or the cost of one never answered."""
        held = self._latency.get(stable_id)
        if held is not None:
            return held[0]
        count = len(self._latency)
        return self._sum / count if count else 1.0

    def estimate(self, stable_id: str) -> float:
        """The expected time of one more request there: ``(queue + 1) x latency``,
        the latency no less than ``floor_s``."""
        latency = max(self.latency(stable_id), self.settings.floor_s)
        return (self.queue(stable_id) + 1.0) * latency

    def take_report(self, reported: Mapping[str, float], now: float = 0.0) -> None:
        """New reports of waiting+running requests per candidate, taken up at ``now``:
        each moves the others' queue of its candidate towards it (see ``report_decay_s``).

        A candidate without a report has no others' queue added.
        """
        own, held = self.in_flight, self.others
        decay = self.settings.report_decay_s
        since = None if self._reported_at is None else max(0.0, now - self._reported_at)
        keep = 0.0 if since is None or decay == 0 else math.exp(-since / decay)
        self._reported_at = now
        others = {}
        for stable_id, queued in reported.items():
            fresh = max(0.0, float(queued) - own.get(stable_id, 0))
            before = held.get(stable_id)
            others[stable_id] = fresh if before is None else fresh + (before - fresh) * keep
        self.others = others

    def forget(self, keep: Container[str]) -> None:
        """Drop reports and latencies of candidates no longer routed; in-flight counts
        end by themselves."""
        self.others = {k: v for k, v in self.others.items() if k in keep}
        self._latency = {k: v for k, v in self._latency.items() if k in keep}
        self._sum = sum(a for a, _at in self._latency.values())
