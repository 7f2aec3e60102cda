"""The gateway's Prometheus metrics (admin ``/metrics``); every label set is closed.

The per-request counters are plain integers in `Tally` objects, read by a custom
collector at scrape time: a `prometheus_client` counter takes a lock and checks
exemplars on every increment, which on the request path costs more than the
routing decision itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

OUTCOMES = (
    "routed",
    "no_candidate",
    "bad_request",
    "too_large",
    "body_timeout",
    "not_found",
    "upstream_unavailable",
    "stream_broken",
    "budget_exhausted",
    "unauthenticated",
)
"""Every value of ``grid_gateway_requests_total{outcome}``."""

RELOADS = ("accepted", "rejected")

SIGNALS_POLLS = ("ok", "not_modified", "error")
"""Every value of ``grid_gateway_signals_polls_total{outcome}`` (poll mode)."""


class Tally:
    """One counter value; ``inc`` is a plain integer add (one event loop, no lock)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        """Add ``amount``."""
        self.value += amount


class _Family:
    """A counter family over a closed set of label values."""

    def __init__(self, name: str, doc: str, label: str | None, values: Iterable[str]) -> None:
        self.name, self.doc, self.label = name, doc, label
        self.tallies = {value: Tally() for value in values}

    def metric(self) -> CounterMetricFamily:
        labels = [self.label] if self.label else []
        family = CounterMetricFamily(self.name, self.doc, labels=labels)
        for value, tally in self.tallies.items():
            family.add_metric([value] if self.label else [], tally.value)
        return family


class _GaugeFamily(_Family):
    """A gauge family over a closed set of label values (tallies that also go down)."""

    def metric(self) -> GaugeMetricFamily:  # type: ignore[override]
        family = GaugeMetricFamily(self.name, self.doc, labels=[str(self.label)])
        for value, tally in self.tallies.items():
            family.add_metric([value], tally.value)
        return family


class _SelectionFamily:
    """``grid_gateway_selections_total{cluster, group}``: one tally per pair seen.

    The pairs are bounded by the overlay's candidates (each has one cluster and
    one group), so the label set stays closed.
    """

    name = "grid_gateway_selections"

    def __init__(self) -> None:
        self.tallies: dict[tuple[str, int], Tally] = {}

    def tally(self, cluster: str, group: int) -> Tally:
        key = (cluster, group)
        found = self.tallies.get(key)
        if found is None:
            found = self.tallies[key] = Tally()
        return found

    def metric(self) -> CounterMetricFamily:
        family = CounterMetricFamily(
            self.name,
            "Requests whose first attempt selection sent to each cluster, by selection group.",
            labels=["cluster", "group"],
        )
        for (cluster, group), tally in sorted(self.tallies.items()):
            family.add_metric([cluster, str(group)], tally.value)
        return family


class _TallyCollector(Collector):
    def __init__(self, families: list[_Family | _SelectionFamily]) -> None:
        self._families = families

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        for family in self._families:
            yield family.metric()


class GatewayMetrics:
    """Counters and gauges of one gateway process."""

    def __init__(self, clusters: Iterable[str]) -> None:
        clusters = tuple(clusters)
        self.registry = CollectorRegistry()
        requests = _Family(
            "grid_gateway_requests", "Client requests by outcome.", "outcome", OUTCOMES
        )
        upstream = _Family(
            "grid_gateway_upstream_requests",
            "Requests sent to each cluster (every attempt, failovers included).",
            "cluster",
            clusters,
        )
        failovers = _Family(
            "grid_gateway_failovers",
            "Attempts abandoned for the next candidate before any byte reached the client.",
            None,
            [""],
        )
        reloads = _Family(
            "grid_gateway_overlay_reloads",
            "Overlay file reloads by result; a rejected one keeps the last good snapshot.",
            "result",
            RELOADS,
        )
        polls = _Family(
            "grid_gateway_signals_polls",
            "Polls of the operator's signals (poll mode) by outcome.",
            "outcome",
            SIGNALS_POLLS,
        )
        in_flight = _GaugeFamily(
            "grid_gateway_upstream_in_flight",
            "Attempts to each cluster whose answer has not ended yet.",
            "cluster",
            clusters,
        )
        ejections = _Family(
            "grid_gateway_ejections",
            "Candidates of each cluster ejected from selection by passive health.",
            "cluster",
            clusters,
        )
        self.selections = _SelectionFamily()
        self.requests = requests.tallies
        self.upstream = upstream.tallies
        self.failovers = failovers.tallies[""]
        self.reloads = reloads.tallies
        self.signals_polls = polls.tallies
        self.in_flight = in_flight.tallies
        self.ejections = ejections.tallies
        families = [requests, upstream, failovers, reloads, polls, in_flight, ejections]
        self.registry.register(_TallyCollector([*families, self.selections]))

    def add_cluster(self, name: str) -> None:
        """Label values for a cluster that joined praxis.yaml."""
        for tallies in (self.upstream, self.in_flight, self.ejections):
            tallies.setdefault(name, Tally())

    def gauge(self, name: str, doc: str, read: Callable[[], float]) -> None:
        """A gauge whose value is read at scrape time."""
        Gauge(name, doc, registry=self.registry).set_function(read)
