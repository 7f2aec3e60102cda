"""Routing candidates: one (provider, model) pair as the scoring engine sees it.

`CandidateInput` is the unit a render drafts (`grid.core.routing.candidate_draft`),
scores (`grid.core.routing.scoring`) and ranks (`grid.core.routing.ranking`).
It carries what scoring reads (site, backend kind, geography, raw signals,
health and freshness) and what the overlay carries through untouched (the
routing identity and a credential reference, never a token). `ExclusionReason`
says why a candidate is left out of the overlay, whichever step decides it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from grid.core.vocabulary import BackendKind, CandidateKind

__all__ = [
    "BackendKind",
    "CandidateInput",
    "CredentialRef",
    "ExclusionReason",
    "Geography",
    "SignalValues",
    "provider_candidates",
    "with_cost",
]


class ExclusionReason(StrEnum):
    """Why a candidate is not in the overlay (as ``explain`` reports it).

    Drafting decides the first three (before scoring), ranking the next two,
    and the overlay's candidate limit the last.
    """

    ACCESS_DENIED = "access_denied"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    STALE_EVICTED = "stale_evicted"
    UNHEALTHY = "unhealthy"
    ADMISSION_EXCLUDED = "admission_excluded"
    CANDIDATE_LIMIT = "candidate_limit"


@dataclass(frozen=True)
class Geography:
    """A GridSite's region and zone; ``None`` means unknown."""

    region: str | None = None
    zone: str | None = None


@dataclass(frozen=True)
class SignalValues:
    """Raw observed signals of one provider; ``None`` means missing, never zero.

    ``queue_depth``, ``kv_cache_utilization`` and ``prefix_cache_hit_ratio`` are
    ratios in [0, 1]; ``p99_latency_ms`` and ``cost_per_million_input_tokens``
    are non-negative.
    """

    queue_depth: float | None = None
    kv_cache_utilization: float | None = None
    prefix_cache_hit_ratio: float | None = None
    p99_latency_ms: float | None = None
    cost_per_million_input_tokens: float | None = None


@dataclass(frozen=True)
class CredentialRef:
    """A reference to the Secret key Praxis injects; never the token itself."""

    strategy: str
    secret_name: str
    secret_namespace: str
    secret_key: str


@dataclass(frozen=True)
class CandidateInput:
    """One routable (provider, model) pair, as the scoring engine sees it.

    ``name`` is the model, ``site`` the provider's site, ``cluster`` its routing
    identity and ``provider`` the InferenceProvider name (used in explanations).
    ``geography`` is the provider site's GridSite geography, ``None`` when the
    site is unknown. ``credential`` is carried through untouched to the overlay.
    """

    name: str
    site: str
    cluster: str
    provider: str
    backend_kind: BackendKind
    signals: SignalValues = field(default_factory=SignalValues)
    geography: Geography | None = None
    healthy: bool = True
    fresh: bool = True
    observed_at: datetime | None = None
    credential: CredentialRef | None = None
    kind: str = CandidateKind.INFERENCE_MODEL.value
    capacity_weight: int = 1
    """The provider's ``spec.capacityWeight`` (§14), carried through to the overlay."""


def with_cost(values: SignalValues, cost: float | None) -> SignalValues:
    """``values`` with a missing input cost taken from ``cost`` (a provider's spec).

    ``values`` itself when it has a cost or ``cost`` is ``None``.
    """
    if cost is None or values.cost_per_million_input_tokens is not None:
        return values
    # Spelled out: dataclasses.replace costs twice as much, once per provider per render.
    return SignalValues(
        values.queue_depth,
        values.kv_cache_utilization,
        values.prefix_cache_hit_ratio,
        values.p99_latency_ms,
        cost,
    )


def provider_candidates(
    models: Iterable[str],
    *,
    site: str,
    cluster: str,
    provider: str,
    backend_kind: BackendKind,
    signals: SignalValues,
    geography: Geography | None,
    healthy: bool,
    fresh: bool,
    observed_at: datetime | None,
    credential: CredentialRef | None,
    kind: str = CandidateKind.INFERENCE_MODEL.value,
    capacity_weight: int = 1,
) -> tuple[CandidateInput, ...]:
    """One provider's candidates: ``CandidateInput(name=model, ...)`` for each model.

    Every field but the name is shared, down to the same signals and geography
    objects, so the candidates form one group that ranking evaluates once
    (`grid.core.routing.ranking.order_candidates`).

    A render makes one candidate per (provider, model), thousands of them, and
    the frozen ``__init__`` (one ``object.__setattr__`` per field) is most of
    what that costs, so each candidate is made as a copy of one shared instance
    dict instead. ``CandidateInput`` has no ``__post_init__``, ``InitVar`` or
    ``__slots__``, so the result is exactly the constructor's (a test holds the
    two equal in fields, equality, hash and repr). This is the only place
    records are built this way: the render bench shows no gain anywhere else.
    """
    state = {
        "name": "",
        "site": site,
        "cluster": cluster,
        "provider": provider,
        "backend_kind": backend_kind,
        "signals": signals,
        "geography": geography,
        "healthy": healthy,
        "fresh": fresh,
        "observed_at": observed_at,
        "credential": credential,
        "kind": kind,
        "capacity_weight": capacity_weight,
    }
    made = []
    for model in models:
        own = state.copy()
        own["name"] = model
        candidate = object.__new__(CandidateInput)
        object.__setattr__(candidate, "__dict__", own)
        made.append(candidate)
    return tuple(made)
