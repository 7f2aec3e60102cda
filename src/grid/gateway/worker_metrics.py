"""The sum of every worker's ``/metrics``: what ``grid gateway --workers N`` serves on admin.

Each worker counts in plain integers read at scrape time (`grid.gateway.metrics`),
which ``prometheus_client``'s multiprocess mode cannot see (it aggregates only its
own counter and gauge classes, through files, at a cost on every increment). So the
supervisor reads each worker's exposition from its private admin listener and adds
them up, series by series (name and label set):

* counters are summed, and never drop while the supervisor runs: when a worker
  dies, the counts last read from it are kept (`WorkerMetrics.retire`), so its
  replacement adds to them. What a crashed worker counted after its last read is
  lost, as a crashed single process loses everything; a worker that stopped
  gracefully saved its tenant counters, and its replacement takes them up;
* gauges are summed over the workers that answered (in-flight requests, open
  connections, affinity bindings);
* the `PER_GATEWAY` families are the same in every worker, because every worker
  reads the same files (overlay reloads, candidates, client keys) or only the
  first reports (ingest feedback): they are the largest worker's value, not a sum.

The site operator prices increases of ``grid_gateway_tenant_tokens_total`` and
reads a drop as a restart, so a sum that dropped when one worker restarted would
be priced twice; `retire` is what keeps the budget ingest exact.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

PER_GATEWAY = frozenset(
    {
        "grid_gateway_overlay_reloads",
        "grid_gateway_candidates",
        "grid_gateway_ingest_rejected",
        "grid_gateway_feedback_pending",
        "grid_gateway_client_keys",
        "grid_gateway_client_keys_reloads",
    }
)
"""Families every worker holds the same value of: reported once (the maximum), not summed."""

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
"""A sample's name and its sorted label pairs."""


@dataclass(frozen=True)
class Family:
    """One metric family's name, type and help, as a worker exposed it."""

    name: str
    kind: str
    doc: str


@dataclass
class Exposition:
    """One worker's parsed ``/metrics``: families and every sample's value."""

    families: dict[str, Family] = field(default_factory=dict)
    samples: dict[SeriesKey, float] = field(default_factory=dict)
    family_of: dict[SeriesKey, str] = field(default_factory=dict)

    def counters(self) -> Iterator[tuple[SeriesKey, float]]:
        """The summed counter samples (not the `PER_GATEWAY` ones, not ``_created``)."""
        for key, value in self.samples.items():
            family = self.families[self.family_of[key]]
            summed = family.kind == "counter" and family.name not in PER_GATEWAY
            if summed and not key[0].endswith("_created"):
                yield key, value


def parse(text: str) -> Exposition:
    """A worker's exposition text, parsed."""
    parsed = Exposition()
    for metric in text_string_to_metric_families(text):
        parsed.families[metric.name] = Family(metric.name, metric.type, metric.documentation)
        for sample in metric.samples:
            key: SeriesKey = (sample.name, tuple(sorted(sample.labels.items())))
            parsed.samples[key] = float(sample.value)
            parsed.family_of[key] = metric.name
    return parsed


class WorkerMetrics:
    """The last exposition read from each worker slot, and the counts of retired workers."""

    def __init__(self, restored: Mapping[SeriesKey, float] | None = None) -> None:
        """``restored`` are counter samples a graceful stop saved (the tenant tokens)."""
        self.retained: dict[SeriesKey, float] = dict(restored or {})
        """Counter samples of workers that are gone (and those restored at start)."""
        self.last: dict[int, Exposition] = {}
        self._families: dict[str, Family] = {}
        self._family_of: dict[SeriesKey, str] = {}

    def observe(self, slot: int, text: str) -> None:
        """Record what the worker in ``slot`` exposed just now."""
        parsed = parse(text)
        self.last[slot] = parsed
        self._families.update(parsed.families)
        self._family_of.update(parsed.family_of)

    def retire(self, slot: int, saved: frozenset[str] = frozenset()) -> None:
        """The worker in ``slot`` is gone: keep the counts last read from it.

        ``saved`` are the families it saved for its successor (a graceful stop saves
        the tenant counters), which restores them: those are held in its slot until the
        successor is read, so the sum neither drops meanwhile nor counts them twice.
        """
        parsed = self.last.pop(slot, None)
        if parsed is None:
            return
        held = Exposition(families=parsed.families)
        for key, value in parsed.counters():
            name = parsed.family_of[key]
            if name in saved:
                held.samples[key], held.family_of[key] = value, name
            else:
                self.retained[key] = self.retained.get(key, 0.0) + value
        if held.samples:
            self.last[slot] = held

    def total(self, answered: set[int]) -> dict[SeriesKey, float]:
        """Every series over the workers: ``answered`` are the slots read just now; the
        counters of the others are their last reading, their gauges are left out."""
        totals: dict[SeriesKey, float] = dict(self.retained)
        for slot, parsed in self.last.items():
            fresh = slot in answered
            for key, value in parsed.samples.items():
                family = parsed.families[parsed.family_of[key]]
                if family.name in PER_GATEWAY:
                    totals[key] = max(totals.get(key, value), value)
                elif family.kind == "counter" and not key[0].endswith("_created"):
                    totals[key] = totals.get(key, 0.0) + value
                elif fresh:
                    if key[0].endswith("_created"):
                        totals[key] = min(totals.get(key, value), value)
                    else:
                        totals[key] = totals.get(key, 0.0) + value
        return totals

    def exposition(self, answered: set[int], extra: list[Metric] | None = None) -> bytes:
        """The summed series in Prometheus text format, with ``extra`` families appended."""
        totals = self.total(answered)
        families: dict[str, Metric] = {}
        for key in sorted(totals):
            name = self._family_of.get(key)
            if name is None:  # a restored series no worker has exposed yet
                name = key[0].removesuffix("_total")
                self._families.setdefault(name, Family(name, "counter", ""))
            family = self._families[name]
            metric = families.get(name)
            if metric is None:
                metric = families[name] = Metric(family.name, family.doc, family.kind)
            metric.add_sample(key[0], dict(key[1]), totals[key])
        registry = CollectorRegistry()
        registry.register(_Fixed([*families.values(), *(extra or [])]))
        return generate_latest(registry)


class _Fixed(Collector):
    """Yields families already built."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families
