"""Tenant spend at the operator (SPEC-DECISIONS §12): scrape, price, persist, gossip, view.

Every ``budget_scrape_interval_s`` the site scrapes its local gateways'
``grid_gateway_tenant_tokens_total`` (the ``--gateway-metrics`` URLs, read by
`grid.operator.gateway_scrape`), prices each increase with the cluster's
provider costs from the replica's provider records, and folds it into its
`Ledger` (`grid.core.metering.budgets`). A changed ledger is persisted
(`grid.operator.ledger_store`: its ConfigMap, and the state file when there is
a state directory) before anything is gossiped, and its whole cents become this
site's own G-Counter slot in the state lane. A restart loads the ledger back,
so the slot never goes down; a slot the mesh echoes back higher (our own lane
from before a lost copy) is taken up too.

Each render round the site sums every origin's slot per policy tenant (a lower
bound of the grid's spend), reports ``status.budgetStatus[]`` and writes the
budget view ``grid-budgets.json`` beside each served gateway's overlay when a
ratio moved by 0.01 or reached 1.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import Any

import aiohttp

from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import GridStateSnapshot
from grid.core.metering.budgets import (
    Ledger,
    Price,
    budget_status,
    budget_view,
    raise_own_slots,
    ratios,
    view_moved,
)
from grid.core.overlay import format_timestamp
from grid.core.resources import GridNetwork
from grid.errors import GridError
from grid.operator.gateway_scrape import GatewayCounters, GatewayScrape
from grid.operator.ledger_store import LedgerStore
from grid.operator.resilience import RoundFailures, guarded_rounds

log = logging.getLogger(__name__)


def cluster_prices(replica: GridState) -> dict[str, Price]:
    """Each cluster's price from the provider records (the first record of a cluster wins).

    Both prices are the spec's, carried in the record under either signal
    transport; a record from a peer that predates the record's input price
    carries it only as the signal.
    """
    prices: dict[str, Price] = {}
    for _origin, _pid, record in replica.providers():
        if record.cluster in prices:
            continue
        cost_in = record.cost_per_million_input_tokens
        if cost_in is None:
            cost_in = record.signals.cost_per_million_input_tokens
        cost_out = record.cost_per_million_output_tokens
        if cost_in is None and cost_out is None:
            continue
        prices[record.cluster] = Price.of(cost_in, cost_out)
    return prices


class BudgetMeter:
    """The site's ledger, its persistence, and its slot in the local snapshot."""

    def __init__(self, site: str, ledgers: LedgerStore) -> None:
        self.site = site
        self.ledgers = ledgers
        self.ledger = Ledger()
        self.save_failures = 0
        self.save_failing = False
        """Whether the last save of a grown ledger failed (until one succeeds)."""

    async def load(self) -> None:
        """Read the persisted ledger (call once, before the slot is first published)."""
        self.ledger = await self.ledgers.load()

    async def observe(self, scraped: Mapping[str, GatewayCounters], replica: GridState) -> bool:
        """Fold one round of the gateways' counters into the ledger; True when it grew.

        The grown ledger is persisted first; when that fails the old one is kept,
        so what was not saved is neither gossiped nor lost (the next round prices
        the same counters again).
        """
        prices = cluster_prices(replica)
        ledger = self.ledger
        for url, counters in sorted(scraped.items()):
            ledger = ledger.observe(url, counters.tokens, prices)
        ledger = ledger.at_least(self.mesh_slots(replica))
        if ledger == self.ledger:
            return False
        try:
            await self.ledgers.save(ledger)
        except (GridError, OSError) as exc:
            self.save_failures += 1
            self.save_failing = True
            log.error("budget ledger not saved; keeping the last one",
                      extra={"error": type(exc).__name__})  # fmt: skip
            return False
        self.save_failing = False
        self.ledger = ledger
        return True

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


class BudgetLoop:
    """Scrape the local gateways, price their tokens, raise and gossip our slot, forever."""

    def __init__(
        self,
        gateways: GatewayScrape,
        meter: BudgetMeter,
        replica: GridState,
        write: Callable[[Callable[[GridStateSnapshot], GridStateSnapshot]], Awaitable[bool]],
        *,
        interval_s: float,
        traffic_changed: Callable[[], None],
        spend_changed: Callable[[], None],
        failures: RoundFailures | None = None,
    ) -> None:
        """``write`` applies a change to our snapshot (`LanePublisher.write`);
        ``traffic_changed`` tells the live view the gateways' traffic or recent
        selections moved, and ``spend_changed`` asks for a render round (the budget
        view may move)."""
        self.gateways = gateways
        self.meter = meter
        self.replica = replica
        self._write = write
        self.interval_s = interval_s
        self._traffic_changed = traffic_changed
        self._spend_changed = spend_changed
        self.failures = failures or RoundFailures()

    async def run(self) -> None:
        """A scrape every ``interval_s``."""
        async with aiohttp.ClientSession() as http:
            while True:
                await guarded_rounds("budgets", self.failures, lambda: self.round(http))
                await asyncio.sleep(self.interval_s)

    async def round(self, http: aiohttp.ClientSession) -> None:
        """One scrape, priced into our slot and published; nothing without a gateway."""
        if not self.gateways.targets():
            return
        traffic = (self.gateways.traffic(), self.gateways.recent_selections())
        scraped = await self.gateways.scrape(http)
        if (self.gateways.traffic(), self.gateways.recent_selections()) != traffic:
            self._traffic_changed()
        failing = self.meter.save_failing
        grew = await self.meter.observe(scraped, self.replica)
        before = self.replica.local
        await self._write(self.meter.publish)
        if grew or self.replica.local != before or self.meter.save_failing != failing:
            self._spend_changed()
