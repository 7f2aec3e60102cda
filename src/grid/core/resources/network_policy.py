"""GridNetwork policy fields written in upstream Grid's shape (SPEC-DECISIONS §2a).

Manifests written for upstream Grid carry ``scoringPolicy``, ``admissionPolicy``,
``budgetPolicy``, ``metricsRefreshInterval``, ``routingPolicy`` and
``selectionPolicy`` on the GridNetwork. Grid accepts
them unchanged and maps the first two onto the seed's own fields (``scoring`` and
``admission``, §2 and §4); `GridNetworkSpec` applies the mapping. When both
spellings are present the seed-shaped field wins and the operator says so in a
``SeedFieldsWin`` condition. ``budgetPolicy`` is validated here; its behaviour is
§12's. docs/migrating-from-upstream.md documents each mapping.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from grid.core.resources.duration import Duration, parse_duration
from grid.core.resources.errors import field_error
from grid.core.resources.types import NonNegative, Ratio, Text, WireModel
from grid.core.vocabulary import SelectionMode

ScoringStrategy = Literal["noMetrics", "queueDepth", "kvCachePressure"]

SCORING_PRESETS: dict[str, dict[str, float]] = {
    "noMetrics": {"locality": 3.0, "cost": 1.0},
    "queueDepth": {"locality": 3.0, "queue_depth": 3.0, "cost": 1.0},
    "kvCachePressure": {"locality": 3.0, "kv_cache": 2.0, "cost": 1.0},
}
"""The weights each ``scoringPolicy.strategy`` stands for; every weight not listed is 0.
Locality and cost keep their §2 defaults (3 and 1), the kept signal its own (3 or 2)."""

PRESSURE_SIGNALS: dict[str, tuple[str, ...]] = {
    "noMetrics": (),
    "queueDepth": ("queue_depth",),
    "kvCachePressure": ("kv_cache",),
}
"""The admission ratios a strategy's pressure is read from; without a strategy, both."""

PRESSURE_FAILURE_MAX = 100
"""Largest ``failureThreshold``/``successThreshold``: a hundred consecutive
observations is already minutes of pressure at any scrape interval."""


class ScoringPolicySpec(WireModel):
    """Upstream's scoring preset; used only when ``spec.scoring`` is absent."""

    strategy: ScoringStrategy


class PressureSpec(WireModel):
    """Upstream's pressure hysteresis (all six fields required when given)."""

    enter_threshold: Ratio
    """A pressure ratio at or above this puts a candidate in existing_only admission."""
    exit_threshold: Ratio
    """Under ``mode: stabilized``, a ratio below this counts towards leaving it."""
    failure_threshold: int = Field(ge=1, le=PRESSURE_FAILURE_MAX)
    """Consecutive observations at or above enterThreshold needed to enter (stabilized)."""
    success_threshold: int = Field(ge=1, le=PRESSURE_FAILURE_MAX)
    """Consecutive observations below exitThreshold needed to leave (stabilized)."""
    minimum_state_duration: Duration
    """Least time a candidate stays in either state before it may change (stabilized)."""
    recovery_hold_down: Duration
    """Least time since the last observation at or above enterThreshold before leaving."""

    @model_validator(mode="after")
    def _exit_below_enter(self) -> PressureSpec:
        if not self.exit_threshold < self.enter_threshold:
            raise field_error("exitThreshold", "must be lower than enterThreshold")
        for name, value in (
            ("minimumStateDuration", self.minimum_state_duration),
            ("recoveryHoldDown", self.recovery_hold_down),
        ):
            if parse_duration(value) <= 0:
                raise field_error(name, "must be a positive duration")
        return self


def _pressure_default() -> PressureSpec:
    # Upstream's defaults when `pressure` is omitted.
    return PressureSpec(
        enter_threshold=0.85,
        exit_threshold=0.70,
        failure_threshold=2,
        success_threshold=3,
        minimum_state_duration="10s",
        recovery_hold_down="30s",
    )


class AdmissionPolicySpec(WireModel):
    """Upstream's admission policy, mapped onto §4's admission (see the module doc)."""

    mode: Literal["instantaneous", "stabilized"] = "instantaneous"
    """instantaneous: thresholds only; stabilized: the hysteresis of `pressure`."""
    pressure: PressureSpec = Field(default_factory=_pressure_default)
    missing_metrics: Literal["existingOnly", "excluded"] = "existingOnly"
    """Admission of a self-hosted candidate whose pressure signal is missing, when a
    scoringPolicy strategy names one (queueDepth, kvCachePressure)."""


class SelectionPolicySpec(WireModel):
    """How a gateway picks among the equivalent candidates of one group (§14)."""

    mode: SelectionMode = Field(default=SelectionMode.LEAST_LOADED, strict=False)
    """``deterministic`` (the first viable candidate, upstream's default), ``roundRobin``,
    ``random``, ``weightedRandom`` (by each provider's ``capacityWeight``) or
    ``leastLoaded`` (Grid's default: power of two choices on the load estimate)."""


TENANTS_MAX = 1024
"""Tenants a budgetPolicy may name: each is a metric label value at every gateway
and an entry of status.budgetStatus, so the set must stay small and closed."""


class TenantBudgetSpec(WireModel):
    """One tenant whose spend is tracked (§12)."""

    tenant_id: Text = Field(min_length=1, max_length=256)
    cap_usd: NonNegative


class BudgetPolicySpec(WireModel):
    """Tenants whose spend is tracked; absent means none (§12)."""

    tenants: list[TenantBudgetSpec] = Field(default_factory=list, max_length=TENANTS_MAX)
    default_tenant: Text | None = Field(default=None, min_length=1, max_length=256)
    """The tenant a request without a tenant is charged to under ``clientAuth.mode: none``
    (§15); absent leaves such requests uncharged (counted as ``other``)."""

    @model_validator(mode="after")
    def _unique_tenants(self) -> BudgetPolicySpec:
        # Tenants compare case-insensitively (§15): ACME and acme are one tenant.
        seen: set[str] = set()
        for i, tenant in enumerate(self.tenants):
            if tenant.tenant_id.casefold() in seen:
                raise field_error(f"tenants[{i}].tenantId", "duplicate tenant (in any case)")
            seen.add(tenant.tenant_id.casefold())
        return self

    def caps(self) -> dict[str, float]:
        """Each tenant's cap in USD."""
        return {t.tenant_id: t.cap_usd for t in self.tenants}
