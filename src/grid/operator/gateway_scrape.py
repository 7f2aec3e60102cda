"""Scraping the site's local gateways: one read of each admin ``/metrics`` per round.

The ``--gateway-metrics`` URLs are read once per ``budget_scrape_interval_s``.
Two families are taken from each exposition:

* ``grid_gateway_tenant_tokens_total{tenant, cluster, direction}``, which the
  budget meter prices into the site's spend slot (`grid.operator.budgets`);
* ``grid_gateway_upstream_requests_total{cluster}``, the requests this site's
  gateways sent to each cluster, which the live view shows as traffic.

A body is bounded (`SCRAPE_MAX_BYTES`) and a URL that fails (refused, timed
out, not 200, too large, not text) is skipped for the round and counted; the
others still count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from grid.core.budgets import DIRECTIONS, CounterKey

SCRAPE_MAX_BYTES = 8 * 1024 * 1024
"""Largest gateway /metrics body read; a longer one fails that scrape."""

_TOKENS = "grid_gateway_tenant_tokens"
_UPSTREAM = "grid_gateway_upstream_requests"


def _counter_samples(text: str, family_name: str) -> Iterable[tuple[Mapping[str, str], float]]:
    """(labels, value) of each finite, non-negative ``{family}_total`` sample."""
    for family in text_string_to_metric_families(text):
        if family.name != family_name:
            continue
        for sample in family.samples:
            if sample.name != f"{family_name}_total":
                continue
            if math.isfinite(sample.value) and sample.value >= 0:
                yield sample.labels, sample.value


def parse_tenant_tokens(text: str) -> dict[CounterKey, int]:
    """The tenant token counters in a Prometheus text exposition."""
    counters: dict[CounterKey, int] = {}
    for labels, value in _counter_samples(text, _TOKENS):
        direction = labels.get("direction")
        tenant, cluster = labels.get("tenant"), labels.get("cluster")
        if direction not in DIRECTIONS or not tenant or not cluster:
            continue
        counters[(tenant, cluster, direction)] = int(value)
    return counters


def parse_upstream_requests(text: str) -> dict[str, int]:
    """Requests sent to each cluster, from a Prometheus text exposition."""
    counts: dict[str, int] = {}
    for labels, value in _counter_samples(text, _UPSTREAM):
        cluster = labels.get("cluster")
        if cluster:
            counts[cluster] = int(value)
    return counts


@dataclass
class GatewayScrape:
    """The last round's expositions of the site's gateways, and what failed."""

    urls: list[str]
    timeout_s: float
    bodies: dict[str, str] = field(default_factory=dict)
    """URL → the text it served in the last round (failed URLs are absent)."""
    failures: int = 0
    """Failed reads since start."""

    async def scrape(self, http: aiohttp.ClientSession) -> dict[str, str]:
        """Read every URL once; the bodies that were read."""
        bodies: dict[str, str] = {}
        for url in self.urls:
            try:
                bodies[url] = await self._fetch(http, url)
            except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError):
                self.failures += 1
        self.bodies = bodies
        return bodies

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
        """Requests per cluster summed over the gateways read in the last round.

        A text that does not parse counts nothing (the budget meter refuses it too).
        """
        total: dict[str, int] = {}
        for text in self.bodies.values():
            try:
                counts = parse_upstream_requests(text)
            except ValueError:
                continue
            for cluster, n in counts.items():
                total[cluster] = total.get(cluster, 0) + n
        return dict(sorted(total.items()))
