"""Scraping the site's local gateways: one read of each admin ``/metrics`` per round.

The ``--gateway-metrics`` URLs, and the ``{adminUrl}/metrics`` of every gateway
of the served GridNetwork that runs at this site and names one, are read once
per ``budget_scrape_interval_s`` (a URL named both ways is read once).
Two families are taken from each exposition:

* ``grid_gateway_tenant_tokens_total{tenant, cluster, direction}``, which the
  budget meter prices into the site's spend slot (`grid.operator.budgets`);
* ``grid_gateway_upstream_requests_total{cluster}``, the requests this site's
  gateways sent to each cluster, which the live view shows as traffic;
* ``grid_gateway_selections_total{cluster, group}``, the requests whose first
  attempt selection sent to each cluster and group (§14): each URL's scrapes
  feed a `SelectionWindow`, and the live view's scoring panel shows each
  candidate's share of the last minute's selections.

Each body is parsed once, for every family, and only the lines of these families
are handed to the parser (a gateway's exposition is mostly latency histograms,
and the parser's cost is in every line); a body holding none of them is parsed
whole, so one that is not an exposition still fails. A body is bounded
(`SCRAPE_MAX_BYTES`) and a URL that fails (refused, timed out, not 200, too
large, not an exposition) is skipped for the round and counted; the others
still count.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import aiohttp

from grid.adapters.exposition import read_families
from grid.adapters.scrape import only_families
from grid.core.live.selections import SelectionKey, SelectionWindow, recent_total
from grid.core.metering.budgets import DIRECTIONS, CounterKey
from grid.core.routing.metrics_mapping import MetricFamily

SCRAPE_MAX_BYTES = 8 * 1024 * 1024
"""Largest gateway /metrics body read; a longer one fails that scrape."""

_TOKENS = "grid_gateway_tenant_tokens"
_UPSTREAM = "grid_gateway_upstream_requests"
_SELECTIONS = "grid_gateway_selections"


@dataclass(frozen=True)
class GatewayCounters:
    """What one gateway's exposition counted: tenant tokens, requests per cluster, and
    first-attempt selections per (cluster, group)."""

    tokens: dict[CounterKey, int] = field(default_factory=dict)
    upstream: dict[str, int] = field(default_factory=dict)
    selections: dict[SelectionKey, int] = field(default_factory=dict)


_FAMILIES = (_TOKENS, _UPSTREAM, _SELECTIONS)


def read_exposition(text: str) -> GatewayCounters:
    """The families of a Prometheus text exposition in one pass; ValueError if it is not one."""
    counters = GatewayCounters()
    for family in read_families(only_families(text, _FAMILIES) or text):
        if family.name == _TOKENS:
            for labels, value in _totals(family):
                direction = labels.get("direction")
                tenant, cluster = labels.get("tenant"), labels.get("cluster")
                if direction in DIRECTIONS and tenant and cluster:
                    counters.tokens[(tenant, cluster, direction)] = int(value)
        elif family.name == _UPSTREAM:
            for labels, value in _totals(family):
                if cluster := labels.get("cluster"):
                    counters.upstream[cluster] = int(value)
        elif family.name == _SELECTIONS:
            for labels, value in _totals(family):
                cluster, group = labels.get("cluster"), labels.get("group", "")
                if cluster and group.isdecimal() and len(group) <= 6:
                    counters.selections[(cluster, int(group))] = int(value)
    return counters


def _totals(family: MetricFamily) -> Iterable[tuple[Mapping[str, str], float]]:
    """(labels, value) of each finite, non-negative ``{family}_total`` sample."""
    for sample in family.samples:
        total = sample.name == f"{family.name}_total"
        if total and math.isfinite(sample.value) and sample.value >= 0:
            yield sample.labels, sample.value


@dataclass
class GatewayScrape:
    """The last round's counters of the site's gateways, and what failed."""

    urls: list[str]
    """The ``--gateway-metrics`` URLs."""
    timeout_s: float
    declared: Callable[[], list[str]] = list
    """The URLs the served network's ``gatewayRefs[].adminUrl`` declare for this site."""
    counters: dict[str, GatewayCounters] = field(default_factory=dict)
    """URL → what it counted in the last round (failed URLs are absent)."""
    failures: int = 0
    """Failed reads since start (refused, timed out, not 200, too large, not an exposition)."""
    clock: Callable[[], float] = time.monotonic
    _traffic: dict[str, int] = field(default_factory=dict)
    _windows: dict[str, SelectionWindow] = field(default_factory=dict)
    """URL → its scrapes of the selection counters (only URLs in ``urls`` or given counters)."""

    async def scrape(self, http: aiohttp.ClientSession) -> dict[str, GatewayCounters]:
        """Read and parse every URL once; what each URL that answered counted."""
        counters: dict[str, GatewayCounters] = {}
        for url in self.targets():
            try:
                counters[url] = read_exposition(await self._fetch(http, url))
            except (
                aiohttp.ClientError,
                TimeoutError,
                ValueError,
                OverflowError,
                UnicodeDecodeError,
            ):
                self.failures += 1
        self.set_counters(counters)
        return counters

    def targets(self) -> list[str]:
        """Every URL read this round: the flag's, then the declared ones, each once."""
        return list(dict.fromkeys([*self.urls, *self.declared()]))

    def set_counters(self, counters: dict[str, GatewayCounters]) -> None:
        """Take ``counters`` as the last round's, sum their traffic, feed the windows."""
        self.counters = counters
        now = self.clock()
        for url, gateway in counters.items():
            self._windows.setdefault(url, SelectionWindow()).observe(now, gateway.selections)
        total: dict[str, int] = {}
        for gateway in counters.values():
            for cluster, n in gateway.upstream.items():
                total[cluster] = total.get(cluster, 0) + n
        self._traffic = dict(sorted(total.items()))

    async def _fetch(self, http: aiohttp.ClientSession, url: str) -> str:
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with http.get(url, timeout=timeout, allow_redirects=False) as resp:
            if resp.status != 200:
                raise ValueError(f"status {resp.status}")
            body = bytearray()
            async for chunk in resp.content.iter_chunked(65536):
                body += chunk
                if len(body) > SCRAPE_MAX_BYTES:
                    raise ValueError("metrics body too large")
        return body.decode()

    def traffic(self) -> dict[str, int]:
        """Requests per cluster summed over the gateways read in the last round."""
        return self._traffic

    def recent_selections(self) -> dict[SelectionKey, int]:
        """First-attempt selections per (cluster, group) over the last minute, summed over
        the site's gateways (`grid.core.live.selections`)."""
        return recent_total(self._windows.values(), self.clock())
