"""Tenant budgets (SPEC-DECISIONS §12): metering labels, pricing, the site's slot, ratios.

The gateway counts each tenant's tokens per cluster and direction; the site's
operator scrapes those cumulative counters, prices each increase with the
cluster's provider costs and adds it to its own G-Counter slot for the tenant.
Everything here is exact decimal arithmetic on whole cents with a carried
remainder, so fractions of a cent never drift however many requests add up.

`Ledger` is the operator's persisted accounting: the cents of its own slot per
tenant, the fractional remainder per tenant, and the last counter value seen
per source (gateway admin URL), tenant, cluster and direction. A counter lower
than the last seen one is a gateway restart: the new value is all new usage,
never negative spend. A counter whose cluster has no known price is left
unseen, so it is priced (and counted) once the price arrives.

The budget view (`budget_view`) is what the gateway enforces: a tenant whose
ratio is 1 gets 429 ``budget_exhausted``. Because each site's view is a lower
bound of the grid's spend, a partition can only let spend run over, never
reject a tenant under its cap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from typing import Any, Literal

from grid.core.crdt.snapshot import GridStateSnapshot
from grid.errors import ProtocolError

Direction = Literal["input", "output"]
DIRECTIONS: tuple[Direction, ...] = ("input", "output")
"""Every value of the ``direction`` label."""


class BudgetDocumentError(ProtocolError):
    """A saved ledger or a ``grid-budgets.json`` document is not in its shape."""

    code = "malformed_budget_document"


OTHER_TENANT = "other"
"""The ``tenant`` label of every tenant that ``budgetPolicy`` does not name."""

TENANT_HEADER = "x-grid-tenant"
"""The request header a tenant is learnt from (the gateway's default)."""

RATIO_STEP = Decimal("0.01")
"""A ratio change at least this large rewrites ``grid-budgets.json``."""

_MILLION = Decimal(1_000_000)
_CENTS_PER_USD = Decimal(100)

CounterKey = tuple[str, str, Direction]
"""(tenant label, cluster, direction) of one token counter."""


def tenant_label(tenant: str | None, known: frozenset[str]) -> str:
    """The metric label of a request's tenant: itself when the policy names it, else other."""
    return tenant if tenant is not None and tenant in known else OTHER_TENANT


@dataclass(frozen=True, slots=True)
class Price:
    """A cluster's provider costs in USD per million tokens."""

    input_per_million: Decimal
    output_per_million: Decimal

    @classmethod
    def of(cls, input_per_million: float | None, output_per_million: float | None) -> Price:
        """A price from the record's floats (their shortest decimal text, so 0.1 is 0.1)."""
        return cls(_decimal(input_per_million), _decimal(output_per_million))

    def cents(self, direction: Direction, tokens: int) -> Decimal:
        """The exact cost of ``tokens`` in cents."""
        rate = self.input_per_million if direction == "input" else self.output_per_million
        return Decimal(tokens) * rate * _CENTS_PER_USD / _MILLION


def _decimal(value: float | None) -> Decimal:
    if value is None:
        return Decimal(0)
    return Decimal(repr(float(value)))


def counter_increase(last: int | None, now: int) -> int:
    """New usage between two readings of a cumulative counter; a drop is a restart."""
    if last is None or now < last:
        return now
    return now - last


@dataclass(frozen=True, slots=True)
class Ledger:
    """One site's own spend accounting; immutable, persisted as `to_wire`."""

    cents: Mapping[str, int] = field(default_factory=dict)
    """Whole cents of this site's slot per tenant label: only ever grows."""
    remainder: Mapping[str, Decimal] = field(default_factory=dict)
    """Fraction of a cent per tenant, carried into the next increase; in [0, 1)."""
    seen: Mapping[tuple[str, str, str, str], int] = field(default_factory=dict)
    """Last counter reading per (source, tenant, cluster, direction)."""

    def observe(
        self,
        source: str,
        counters: Mapping[CounterKey, int],
        prices: Mapping[str, Price],
    ) -> Ledger:
        """Fold one scrape of ``source``'s counters into the ledger.

        Counters of a cluster without a price are skipped and stay unseen, so
        their usage is counted as soon as the price is known.
        """
        cents = dict(self.cents)
        remainder = dict(self.remainder)
        seen = dict(self.seen)
        for (tenant, cluster, direction), value in sorted(counters.items()):
            price = prices.get(cluster)
            if price is None or value < 0:
                continue
            key = (source, tenant, cluster, direction)
            tokens = counter_increase(seen.get(key), value)
            seen[key] = value
            if tokens == 0:
                continue
            total = remainder.get(tenant, Decimal(0)) + price.cents(direction, tokens)
            whole = int(total.to_integral_value(rounding=ROUND_FLOOR))
            remainder[tenant] = total - whole
            if whole:
                cents[tenant] = cents.get(tenant, 0) + whole
        return Ledger(cents=cents, remainder=remainder, seen=seen)

    def at_least(self, slots: Mapping[str, int]) -> Ledger:
        """The ledger with each slot raised to ``slots`` (what the mesh echoed back)."""
        cents = dict(self.cents)
        for tenant, count in slots.items():
            if count > cents.get(tenant, 0):
                cents[tenant] = count
        return Ledger(cents=cents, remainder=self.remainder, seen=self.seen)

    def to_wire(self) -> dict[str, Any]:
        """The JSON form persisted in the operator's state directory."""
        return {
            "cents": dict(sorted(self.cents.items())),
            "remainder": {t: str(r) for t, r in sorted(self.remainder.items())},
            "seen": [[*key, value] for key, value in sorted(self.seen.items())],
        }

    @classmethod
    def from_wire(cls, doc: Mapping[str, Any]) -> Ledger:
        """Read `to_wire`'s form back; raises `BudgetDocumentError` on anything else."""
        try:
            cents = {str(t): int(c) for t, c in dict(doc["cents"]).items()}
            remainder = {str(t): Decimal(str(r)) for t, r in dict(doc["remainder"]).items()}
            seen = {(str(s), str(t), str(c), str(d)): int(v) for s, t, c, d, v in list(doc["seen"])}
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            raise BudgetDocumentError("not a budget ledger") from exc
        if any(c < 0 for c in cents.values()) or any(not 0 <= r < 1 for r in remainder.values()):
            raise BudgetDocumentError("a budget ledger holds a negative slot or remainder")
        return cls(cents=cents, remainder=remainder, seen=seen)


def raise_own_slots(snapshot: GridStateSnapshot, cents: Mapping[str, int]) -> GridStateSnapshot:
    """The origin's snapshot with its own spend slots raised to ``cents`` (never lowered)."""
    for tenant, count in sorted(cents.items()):
        held = snapshot.state.spend.get(tenant)
        delta = count - (held.slot(snapshot.origin) if held is not None else 0)
        if delta > 0:
            snapshot = snapshot.add_spend(tenant, delta)
    return snapshot


def spend_ratio(spend_cents: int, cap_usd: float) -> Decimal:
    """min(1, spend / cap), and 1 when the cap is 0 (§12)."""
    cap = _decimal(cap_usd)
    if cap <= 0:
        return Decimal(1)
    return min(Decimal(1), Decimal(spend_cents) / _CENTS_PER_USD / cap)


def budget_status(
    caps: Mapping[str, float], spend_cents: Mapping[str, int]
) -> list[dict[str, Any]]:
    """``status.budgetStatus[]``: one item per policy tenant, sorted by ``tenantId``."""
    items = []
    for tenant in sorted(caps):
        cents = spend_cents.get(tenant, 0)
        items.append(
            {
                "tenantId": tenant,
                "spendUsd": float(Decimal(cents) / _CENTS_PER_USD),
                "capUsd": caps[tenant],
                "spendRatio": float(spend_ratio(cents, caps[tenant])),
            }
        )
    return items


def ratios(caps: Mapping[str, float], spend_cents: Mapping[str, int]) -> dict[str, Decimal]:
    """Each policy tenant's spend ratio."""
    return {t: spend_ratio(spend_cents.get(t, 0), cap) for t, cap in sorted(caps.items())}


def view_moved(written: Mapping[str, Decimal] | None, current: Mapping[str, Decimal]) -> bool:
    """Whether ``grid-budgets.json`` must be rewritten: a ratio moved by 0.01 or reached 1.

    A changed tenant set (a policy edit) also rewrites it; so does no file yet.
    """
    if written is None or set(written) != set(current):
        return True
    for tenant, ratio in current.items():
        old = written[tenant]
        if abs(ratio - old) >= RATIO_STEP or (ratio >= 1) != (old >= 1):
            return True
    return False


def budget_view(network: str, current: Mapping[str, Decimal], generated_at: str) -> dict[str, Any]:
    """The ``grid-budgets.json`` document: ``{network, budgets[], generated_at}``."""
    return {
        "network": network,
        "budgets": [
            {"tenant_id": tenant, "spend_ratio": float(ratio)}
            for tenant, ratio in sorted(current.items())
        ],
        "generated_at": generated_at,
    }


def exhausted_tenants(doc: object, tenant_max: int = 4096) -> frozenset[str]:
    """Tenants at ratio 1 in a ``grid-budgets.json`` document.

    Raises `BudgetDocumentError` when the document is not in its shape.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("budgets"), list):
        raise BudgetDocumentError("grid-budgets.json must be an object with a budgets list")
    budgets: Iterable[object] = doc["budgets"]
    out: set[str] = set()
    for i, item in enumerate(budgets):
        if i >= tenant_max:
            raise BudgetDocumentError("grid-budgets.json names too many tenants")
        if not isinstance(item, dict):
            raise BudgetDocumentError("a budget entry must be an object")
        tenant, ratio = item.get("tenant_id"), item.get("spend_ratio")
        if not isinstance(tenant, str) or not tenant:
            raise BudgetDocumentError("a budget entry needs a tenant_id")
        if isinstance(ratio, bool) or not isinstance(ratio, int | float):
            raise BudgetDocumentError("a budget entry needs a numeric spend_ratio")
        if ratio >= 1:
            out.add(tenant)
    return frozenset(out)
