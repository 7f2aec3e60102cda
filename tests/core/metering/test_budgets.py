"""Tenant budgets: pricing, the carried remainder, restarts of the counter, ratios, the view."""

from __future__ import annotations

from decimal import Decimal

import pytest

from grid.core.metering.budgets import (
    BudgetDocumentError,
    Ledger,
    Price,
    budget_status,
    budget_view,
    counter_increase,
    exhausted_tenants,
    ratios,
    spend_ratio,
    tenant_label,
    view_moved,
)

PRICE = Price.of(0.2, 0.6)


def test_a_tenant_the_policy_does_not_name_counts_as_other() -> None:
    known = frozenset({"acme"})
    assert tenant_label("acme", known) == "acme"
    assert tenant_label("evil\nlabel", known) == "other"
    assert tenant_label(None, known) == "other"


def test_a_counter_that_drops_is_a_restart_not_negative_spend() -> None:
    assert counter_increase(None, 7) == 7
    assert counter_increase(7, 10) == 3
    assert counter_increase(10, 4) == 4


def test_fractions_of_a_cent_are_carried_until_they_make_a_cent() -> None:
    # 0.2 USD per million input tokens: 10,000 tokens cost 0.2 cents.
    ledger = Ledger()
    for reading in range(1, 5):
        ledger = ledger.observe("gw", {("acme", "c", "input"): 10_000 * reading}, {"c": PRICE})
    assert ledger.cents == {}
    assert ledger.remainder["acme"] == Decimal("0.8")
    ledger = ledger.observe("gw", {("acme", "c", "input"): 50_000}, {"c": PRICE})
    assert ledger.cents == {"acme": 1}
    assert ledger.remainder["acme"] == 0


def test_a_gateway_restart_counts_the_new_usage_once() -> None:
    prices = {"c": Price.of(1000, 1000)}  # 0.1 cents per token
    ledger = Ledger().observe("gw", {("acme", "c", "output"): 100}, prices)
    assert ledger.cents == {"acme": 10}
    ledger = ledger.observe("gw", {("acme", "c", "output"): 100}, prices)
    assert ledger.cents == {"acme": 10}
    ledger = ledger.observe("gw", {("acme", "c", "output"): 30}, prices)  # restarted
    assert ledger.cents == {"acme": 13}


def test_an_unpriced_cluster_is_counted_once_its_price_is_known() -> None:
    ledger = Ledger().observe("gw", {("acme", "x", "input"): 1_000_000}, {})
    assert ledger.cents == {} and ledger.seen == {}
    ledger = ledger.observe("gw", {("acme", "x", "input"): 1_000_000}, {"x": PRICE})
    assert ledger.cents == {"acme": 20}


def test_two_sources_are_tracked_apart() -> None:
    prices = {"c": Price.of(1000, 1000)}
    ledger = Ledger().observe("a", {("t", "c", "input"): 10}, prices)
    ledger = ledger.observe("b", {("t", "c", "input"): 10}, prices)
    assert ledger.cents == {"t": 2}


def test_the_ledger_round_trips_and_refuses_garbage() -> None:
    ledger = Ledger().observe("gw", {("acme", "c", "input"): 12_345}, {"c": PRICE})
    assert Ledger.from_wire(ledger.to_wire()) == ledger
    for bad in ({}, {"cents": {"a": -1}, "remainder": {}, "seen": []}, {"cents": 3}):
        with pytest.raises(BudgetDocumentError):
            Ledger.from_wire(bad)


def test_at_least_never_lowers_a_slot() -> None:
    ledger = Ledger(cents={"a": 5, "b": 9})
    assert ledger.at_least({"a": 7, "b": 2}).cents == {"a": 7, "b": 9}


def test_budget_status_is_sorted_and_caps_the_ratio() -> None:
    status = budget_status({"zeta": 1.0, "acme": 0.5, "free": 0.0}, {"acme": 75, "zeta": 25})
    assert status == [
        {"tenantId": "acme", "spendUsd": 0.75, "capUsd": 0.5, "spendRatio": 1.0},
        {"tenantId": "free", "spendUsd": 0.0, "capUsd": 0.0, "spendRatio": 1.0},
        {"tenantId": "zeta", "spendUsd": 0.25, "capUsd": 1.0, "spendRatio": 0.25},
    ]
    assert spend_ratio(50, 1.0) == Decimal("0.5")


def test_the_view_is_rewritten_on_a_step_of_one_hundredth_or_on_reaching_one() -> None:
    old = {"a": Decimal("0.50")}
    assert view_moved(None, old)
    assert not view_moved(old, {"a": Decimal("0.505")})
    assert view_moved(old, {"a": Decimal("0.51")})
    assert view_moved({"a": Decimal("0.995")}, {"a": Decimal(1)})
    assert view_moved(old, {"a": Decimal("0.5"), "b": Decimal(0)})


def test_the_view_document_names_exhausted_tenants() -> None:
    doc = budget_view("net", ratios({"a": 1.0, "b": 1.0}, {"a": 100, "b": 50}), "t")
    assert doc == {
        "network": "net",
        "budgets": [{"tenant_id": "a", "spend_ratio": 1.0}, {"tenant_id": "b", "spend_ratio": 0.5}],
        "generated_at": "t",
    }
    assert exhausted_tenants(doc) == {"a"}
    for bad in ([], {"budgets": [{"tenant_id": "a"}]}, {"budgets": [{"spend_ratio": 1}]}):
        with pytest.raises(BudgetDocumentError):
            exhausted_tenants(bad)
