"""Tenant metering and soft budget enforcement at the gateway (SPEC-DECISIONS §12).

`TenantMeter` counts the tokens each answer used per tenant, cluster and
direction and exports ``grid_gateway_tenant_tokens_total{tenant, cluster,
direction}``. Tool calls and agent requests (§16) carry no tokens; each one relayed
is counted in ``grid_gateway_tenant_calls_total{tenant, cluster, kind}``. The
tenant label is the request's tenant only for tenants the budget view names;
every other request counts as ``other``, so the label set stays closed and a
client cannot mint label values. Tenants compare
case-insensitively: ``ACME`` is charged to the policy's ``acme``
(`canonical`).

The budget view is ``grid-budgets.json``, which the operator writes beside the
overlay. The gateway checks it as it checks the overlay file: a file that does
not read or decode keeps the last good view. A tenant whose ratio is 1 is
exhausted, and its new requests are answered 429 ``budget_exhausted``.

The counters are cumulative for the process. A graceful stop saves them to the
state file (when one is configured) and the next start takes them up and
removes the file, so the site operator, which prices increases, sees a restart
with no drop and no double count. After a crash there is no file: the counters
start from zero, which the operator reads as a restart.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from grid.adapters.bounded_file import UnreadableFile, read_bounded
from grid.adapters.file_stamp import FileStamp, file_stamp
from grid.core.identity import tenant_key
from grid.core.json_document import DocumentError, decode_json
from grid.core.metering.bounds import UsageBound, billable
from grid.core.metering.budgets import (
    DIRECTIONS,
    BudgetDocumentError,
    CounterKey,
    exhausted_tenants,
    tenant_label,
)
from grid.core.metering.usage import Usage

log = logging.getLogger(__name__)

BUDGETS_FILE = "grid-budgets.json"
"""The budget view's file name, beside the overlay."""

BUDGETS_MAX_BYTES = 1024 * 1024
"""Largest accepted grid-budgets.json (1,024 tenants fit many times over)."""

COUNTERS_MAX = 65_536
"""Counter series kept at most (tenants x clusters x 2); beyond it usage counts as other."""

CallKey = tuple[str, str, str]
"""(tenant label, cluster, candidate kind) of one call counter."""


class TenantMeter(Collector):
    """Per-tenant token counters and the exhausted-tenant set of the budget view."""

    def __init__(self, budgets_path: Path | None, state_path: Path | None = None) -> None:
        self.budgets_path = budgets_path
        self.state_path = state_path
        self.known: frozenset[str] = frozenset()
        self._names: dict[str, str] = {}
        self.exhausted: frozenset[str] = frozenset()
        self.tokens: dict[CounterKey, int] = {}
        self.calls: dict[CallKey, int] = {}
        """Relayed tool calls and agent requests per (tenant label, cluster, kind)."""
        self.view_rejected = 0
        self.implausible: dict[str, int] = {}
        """Answers per cluster whose reported usage exceeded their bound."""
        self._stamp: FileStamp | None = None
        self._restore()
        self.poll()

    # -- counting ---------------------------------------------------------------

    def canonical(self, tenant: str | None) -> str | None:
        """The budget view's spelling of ``tenant`` when it names it in any case."""
        if tenant is None:
            return None
        return self._names.get(tenant_key(tenant), tenant)

    def label(self, tenant: str | None) -> str:
        """The tenant label of a request's ``x-grid-tenant`` value."""
        return tenant_label(tenant, self.known)

    def is_exhausted(self, tenant: str | None) -> bool:
        """Whether the tenant's budget ratio is 1 in the current view."""
        return tenant is not None and tenant in self.exhausted

    def add(self, tenant: str, cluster: str, usage: Usage) -> None:
        """Count one answer's tokens for a tenant label and cluster."""
        prompt, completion = DIRECTIONS
        self._count((tenant, cluster, prompt), usage.prompt_tokens)
        self._count((tenant, cluster, completion), usage.completion_tokens)

    def _count(self, key: CounterKey, tokens: int) -> None:
        counters = self.tokens
        held = counters.get(key)
        if held is None:
            if len(counters) >= COUNTERS_MAX:
                key = ("other", key[1], key[2])
                held = counters.get(key, 0)
            else:
                held = 0
        counters[key] = held + tokens

    def add_call(self, tenant: str, cluster: str, kind: str) -> None:
        """Count one relayed tool call or agent request (they carry no tokens)."""
        key: CallKey = (tenant, cluster, kind)
        if key not in self.calls and len(self.calls) >= COUNTERS_MAX:
            key = ("other", cluster, kind)
        self.calls[key] = self.calls.get(key, 0) + 1

    def add_answer(self, tenant: str, cluster: str, bound: UsageBound, usage: Usage) -> None:
        """Count an answer's tokens within its bound; an implausible one is clamped and counted."""
        billed, plausible = billable(usage, bound)
        if not plausible:
            self.implausible[cluster] = self.implausible.get(cluster, 0) + 1
            log.warning(
                "implausible usage billed at its bound",
                extra={
                    "cluster": cluster,
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "prompt_max": bound.prompt_max,
                    "total_max": bound.total_max,
                },
            )
        self.add(tenant, cluster, billed)

    def collect(self) -> Iterator[CounterMetricFamily]:
        """``grid_gateway_tenant_tokens_total`` at scrape time."""
        family = CounterMetricFamily(
            "grid_gateway_tenant_tokens",
            "Tokens the answers used, by tenant (budgetPolicy tenants, else other), "
            "cluster and direction.",
            labels=["tenant", "cluster", "direction"],
        )
        for (tenant, cluster, direction), value in sorted(self.tokens.items()):
            family.add_metric([tenant, cluster, direction], value)
        yield family
        implausible = CounterMetricFamily(
            "grid_gateway_usage_implausible",
            "Answers whose reported usage exceeded the request's bound (billed at the bound).",
            labels=["cluster"],
        )
        for cluster, count in sorted(self.implausible.items()):
            implausible.add_metric([cluster], count)
        yield implausible
        calls = CounterMetricFamily(
            "grid_gateway_tenant_calls",
            "Tool calls and agent requests relayed, by tenant (budgetPolicy tenants, else "
            "other), cluster and kind (mcp_tool, a2a_agent).",
            labels=["tenant", "cluster", "kind"],
        )
        for (tenant, cluster, kind), count in sorted(self.calls.items()):
            calls.add_metric([tenant, cluster, kind], count)
        yield calls

    # -- the budget view --------------------------------------------------------

    def poll(self) -> bool:
        """Reload the budget view if its file changed; True when a new view was taken."""
        if self.budgets_path is None:
            return False
        stamp = file_stamp(self.budgets_path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        if stamp is None:
            return False
        try:
            document = decode_json(read_bounded(self.budgets_path, BUDGETS_MAX_BYTES))
            exhausted = exhausted_tenants(document)
            known = frozenset(str(b["tenant_id"]) for b in document["budgets"])
        except (UnreadableFile, DocumentError, BudgetDocumentError):
            self.view_rejected += 1
            log.warning("grid-budgets.json does not load; keeping the last good view")
            return False
        self.known, self.exhausted = known, exhausted
        self._names = {tenant_key(t): t for t in sorted(known, reverse=True)}
        return True

    # -- process restarts -------------------------------------------------------

    def save(self) -> None:
        """Write the counters to the state file (a graceful stop)."""
        if self.state_path is None:
            return
        rows = [[t, c, d, v] for (t, c, d), v in sorted(self.tokens.items())]
        calls = [[t, c, k, v] for (t, c, k), v in sorted(self.calls.items())]
        tmp = self.state_path.with_name(f".{self.state_path.name}.tmp")
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as fh:
            json.dump({"tokens": rows, "calls": calls}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.state_path)

    def _restore(self) -> None:
        """Take up the counters a graceful stop saved, then remove the file."""
        if self.state_path is None or not self.state_path.exists():
            return
        try:
            document = decode_json(read_bounded(self.state_path, BUDGETS_MAX_BYTES * 16))
            for tenant, cluster, direction, value in document["tokens"][:COUNTERS_MAX]:
                if direction in DIRECTIONS and isinstance(value, int) and value >= 0:
                    self.tokens[(str(tenant), str(cluster), direction)] = value
            for tenant, cluster, kind, value in document.get("calls", [])[:COUNTERS_MAX]:
                if isinstance(value, int) and value >= 0:
                    self.calls[(str(tenant), str(cluster), str(kind))] = value
        except (UnreadableFile, DocumentError, KeyError, TypeError, ValueError, AttributeError):
            log.warning("the saved tenant counters do not load; starting from zero")
            self.tokens.clear()
            self.calls.clear()
        with contextlib.suppress(OSError):
            self.state_path.unlink()
