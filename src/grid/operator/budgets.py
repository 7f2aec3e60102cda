"""Tenant spend at the operator (SPEC-DECISIONS §12): scrape, price, persist, gossip, view.

Every ``budget_scrape_interval_s`` the site scrapes its local gateways'
``grid_gateway_tenant_tokens_total`` (the ``--gateway-metrics`` URLs), prices
each increase with the cluster's provider costs from the replica's provider
records, and folds it into its `Ledger` (`grid.core.budgets`). A changed ledger
is written to ``budget-ledger.json`` in the state directory (atomically, before
anything is gossiped), and its whole cents become this site's own G-Counter
slot in the state lane. A restart reads the file back, so the slot never goes
down; a slot the mesh echoes back higher (our own lane from before a lost file)
is taken up too.

Each render round the site sums every origin's slot per policy tenant (a lower
bound of the grid's spend), reports ``status.budgetStatus[]`` and writes the
budget view ``grid-budgets.json`` beside each served gateway's overlay when a
ratio moved by 0.01 or reached 1.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from grid.core.budgets import (
    DIRECTIONS,
    CounterKey,
    Ledger,
    Price,
    budget_status,
    budget_view,
    raise_own_slots,
    ratios,
    view_moved,
)
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import GridStateSnapshot
from grid.core.overlay import format_timestamp
from grid.core.resources import GridNetwork
from grid.operator.output import atomic_write

log = logging.getLogger(__name__)

LEDGER_FILE = "budget-ledger.json"
"""The ledger's file name in the state directory."""

SCRAPE_MAX_BYTES = 8 * 1024 * 1024
"""Largest gateway /metrics body read; a longer one fails that scrape."""

_FAMILY = "grid_gateway_tenant_tokens"


def parse_tenant_tokens(text: str) -> dict[CounterKey, int]:
    """The tenant token counters in a Prometheus text exposition."""
    counters: dict[CounterKey, int] = {}
    for family in text_string_to_metric_families(text):
        if family.name != _FAMILY:
            continue
        for sample in family.samples:
            labels = sample.labels
            direction = labels.get("direction")
            tenant, cluster = labels.get("tenant"), labels.get("cluster")
            value = sample.value
            if sample.name != f"{_FAMILY}_total" or direction not in DIRECTIONS:
                continue
            if not tenant or not cluster or not math.isfinite(value) or value < 0:
                continue
            counters[(tenant, cluster, direction)] = int(value)
    return counters


def cluster_prices(replica: GridState) -> dict[str, Price]:
    """Each cluster's price from the provider records (the first record of a cluster wins)."""
    prices: dict[str, Price] = {}
    for _origin, _pid, record in replica.providers():
        if record.cluster in prices:
            continue
        cost_in = record.signals.cost_per_million_input_tokens
        cost_out = record.cost_per_million_output_tokens
        if cost_in is None and cost_out is None:
            continue
        prices[record.cluster] = Price.of(cost_in, cost_out)
    return prices


class BudgetMeter:
    """The site's ledger, its persistence, and its slot in the local snapshot."""

    def __init__(
        self, site: str, urls: list[str], state_dir: Path | None, timeout_s: float
    ) -> None:
        self.site = site
        self.urls = urls
        self.path = state_dir / LEDGER_FILE if state_dir is not None else None
        self.timeout_s = timeout_s
        self.ledger = self._load()
        self.scrape_failures = 0

    def _load(self) -> Ledger:
        if self.path is None or not self.path.exists():
            return Ledger()
        try:
            return Ledger.from_wire(json.loads(self.path.read_text()))
        except (OSError, ValueError) as exc:
            # Refusing to start would stop routing; a lost ledger is recovered
            # from the mesh (our own lane echoed back) as far as peers hold it.
            log.error("budget ledger unreadable; starting from the mesh's view",
                      extra={"error": type(exc).__name__})  # fmt: skip
            return Ledger()

    def _save(self) -> None:
        if self.path is not None:
            atomic_write(self.path, json.dumps(self.ledger.to_wire()).encode())

    async def scrape(self, http: aiohttp.ClientSession, replica: GridState) -> bool:
        """Scrape every gateway once and fold what it counted; True when the ledger grew."""
        prices = cluster_prices(replica)
        before = self.ledger
        for url in self.urls:
            try:
                counters = parse_tenant_tokens(await self._fetch(http, url))
            except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError):
                self.scrape_failures += 1
                continue
            self.ledger = self.ledger.observe(url, counters, prices)
        self.ledger = self.ledger.at_least(self.mesh_slots(replica))
        if self.ledger == before:
            return False
        self._save()
        return True

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

    def mesh_slots(self, replica: GridState) -> dict[str, int]:
        """Our own slot per tenant as the local snapshot holds it (peers' echoes included)."""
        return {t: c.slot(self.site) for t, c in replica.local.state.spend.items()}

    def publish(self, snap: GridStateSnapshot) -> GridStateSnapshot:
        """Raise the snapshot's own slots to the ledger's cents (never lowers one)."""
        return raise_own_slots(snap, self.ledger.cents)


def grid_spend(replica: GridState, tenants: Mapping[str, float]) -> dict[str, int]:
    """Each policy tenant's cents summed over every origin's slot."""
    return {t: replica.spend(t).value for t in tenants}


class BudgetView:
    """``status.budgetStatus[]`` and the ``grid-budgets.json`` each served gateway reads."""

    def __init__(self) -> None:
        self._written: dict[str, dict[str, Decimal]] = {}
        self.writes = 0

    def status(self, network: GridNetwork, replica: GridState) -> list[dict[str, Any]]:
        """The budgetStatus items of this round."""
        caps = network.spec.budget_policy.caps() if network.spec.budget_policy else {}
        return budget_status(caps, grid_spend(replica, caps))

    def document(
        self, network: GridNetwork, replica: GridState, gateway: str
    ) -> dict[str, Any] | None:
        """The view to write for ``gateway``, or None when the written one still holds."""
        caps = network.spec.budget_policy.caps() if network.spec.budget_policy else {}
        current = ratios(caps, grid_spend(replica, caps))
        if not view_moved(self._written.get(gateway), current):
            return None
        now = format_timestamp(dt.datetime.now(dt.UTC))
        return budget_view(network.name, current, now)

    def written(self, gateway: str, document: Mapping[str, Any]) -> None:
        """Record that ``document`` reached the gateway."""
        self._written[gateway] = {
            b["tenant_id"]: Decimal(repr(b["spend_ratio"])) for b in document["budgets"]
        }
        self.writes += 1
