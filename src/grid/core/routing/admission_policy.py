"""Upstream's scoringPolicy and admissionPolicy, mapped onto §4's scoring and admission.

A GridNetwork written for upstream Grid describes admission as one pressure ratio
with hysteresis (``admissionPolicy``) and scoring as a named preset
(``scoringPolicy``). Grid has one scoring engine (`grid.core.routing.scoring`), so
this module translates:

* the weights: `GridNetworkSpec.effective_weights` (the preset, omitted weights 0);
* the pressure signals: a strategy's own ratio (``queueDepth`` -> queue depth,
  ``kvCachePressure`` -> KV-cache utilization), both without a strategy (or under
  ``noMetrics``, which scores no load signal but still admits by load);
* ``pressure.enterThreshold`` becomes the existing-only threshold of each pressure
  signal; a signal that is not a pressure signal triggers no existing-only state;
  the excluded thresholds stay §2's defaults (0.98), raised to enterThreshold
  when it is higher;
* ``missingMetrics`` applies when a strategy names a pressure signal: a
  self-hosted candidate whose pressure ratio is missing is existing_only or
  excluded. Without a strategy, a missing ratio triggers nothing (§4).
* ``mode: stabilized``: `pure grid render` applies the thresholds only; the
  operator's overlay loop runs `grid.core.routing.hysteresis` across renders and
  passes the held groups here.

When ``spec.admission`` is given, admissionPolicy is set aside (the seed-shaped
field wins) and this module returns §2's thresholds unchanged.
"""

from __future__ import annotations

import math

from grid.core.resources.network_policy import PRESSURE_SIGNALS, AdmissionPolicySpec
from grid.core.resources.network_spec import GridNetworkSpec
from grid.core.routing.candidate import SignalValues
from grid.core.routing.scoring import AdmissionThresholds
from grid.core.vocabulary import AdmissionState

DEFAULT_EXCLUDED_RATIO = 0.98
"""§2's excluded threshold, kept for both ratios under an admissionPolicy."""


def pressure_signals(spec: GridNetworkSpec) -> tuple[str, ...]:
    """The admission ratios pressure is read from: the strategy's, else both."""
    strategy = spec.scoring_policy.strategy if spec.scoring_policy else None
    if strategy is None or strategy == "noMetrics":
        return ("queue_depth", "kv_cache")
    return PRESSURE_SIGNALS[strategy]


def admission_thresholds(
    spec: GridNetworkSpec, held: frozenset[tuple[str, str]] | None = None
) -> AdmissionThresholds:
    """The engine's admission thresholds for ``spec`` (§2 admission or admissionPolicy).

    ``held`` is the stabilized hysteresis' existing-only set; it is used only under
    an admissionPolicy with ``mode: stabilized``.
    """
    policy = spec.effective_admission_policy
    if policy is None:
        admission = spec.admission
        return AdmissionThresholds(
            existing_only_queue_depth=admission.existing_only.queue_depth,
            existing_only_kv_cache=admission.existing_only.kv_cache,
            excluded_queue_depth=admission.excluded.queue_depth,
            excluded_kv_cache=admission.excluded.kv_cache,
        )
    watched = pressure_signals(spec)
    enter = policy.pressure.enter_threshold
    excluded = max(DEFAULT_EXCLUDED_RATIO, enter)
    return AdmissionThresholds(
        existing_only_queue_depth=enter if "queue_depth" in watched else math.inf,
        existing_only_kv_cache=enter if "kv_cache" in watched else math.inf,
        excluded_queue_depth=excluded,
        excluded_kv_cache=excluded,
        missing=_missing_state(spec, policy),
        held=held if policy.mode == "stabilized" else None,
    )


def _missing_state(spec: GridNetworkSpec, policy: AdmissionPolicySpec) -> AdmissionState | None:
    strategy = spec.scoring_policy.strategy if spec.scoring_policy else None
    if strategy is None or not PRESSURE_SIGNALS[strategy]:
        return None
    if policy.missing_metrics == "excluded":
        return AdmissionState.EXCLUDED
    return AdmissionState.EXISTING_ONLY


def pressure_ratio(signals: SignalValues, watched: tuple[str, ...]) -> float | None:
    """The highest watched ratio present, None when every watched ratio is missing."""
    values = [
        value
        for name, value in (
            ("queue_depth", signals.queue_depth),
            ("kv_cache", signals.kv_cache_utilization),
        )
        if name in watched and value is not None
    ]
    return max(values) if values else None


def stabilized(spec: GridNetworkSpec) -> AdmissionPolicySpec | None:
    """The admissionPolicy when it applies with ``mode: stabilized``, else None."""
    policy = spec.effective_admission_policy
    return policy if policy is not None and policy.mode == "stabilized" else None
