"""Re-ranking an overlay by pulled signals: the gateway's half of poll mode (§4, §11).

Under ``signalTransport.mode: poll`` the operator's overlay carries no score:
its order is admission, tier, freshness and the tie-break. The gateway pulls
the operator's ``?scope=grid`` signals document and, within each group of
equal (admission, tier, freshness), orders candidates by the §4 score that
`grid.core.routing.scoring` computes from those signals. Nothing moves across
groups, and candidates of equal score keep their overlay order (the sort is
stable), so the overlay's freshness and tie-break order still decides ties.

A candidate is matched to the signals entry of the same origin ``site`` and
``cluster`` that lists its model (an entry with no models matches any). A
candidate with no entry scores the neutral 0.5 on every signal: absence
neither helps nor hurts. When the overlay names no tier (inline candidates in
praxis.yaml carry none), the tier is derived from the sites' geography, as the
operator derives it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from grid.core.routing.candidate import CandidateInput, Geography
from grid.core.routing.scoring import (
    ScoringConfig,
    ScoringContext,
    SignalScores,
    blend,
    selection_tier,
    signal_scores,
)
from grid.core.routing.signals import ProviderSignals, SignalsDocument
from grid.core.vocabulary import (
    NEUTRAL_SIGNAL_SCORE,
    SIGNAL_NAMES,
    BackendKind,
    RouteIdentity,
    ScoreBreakdown,
)

__all__ = [
    "OverlayCandidate",
    "RerankContext",
    "breakdown_of",
    "entry_for",
    "group_key",
    "reported_requests",
    "rerank",
    "score_of",
    "signal_entries",
    "signal_scores_of",
]


class OverlayCandidate(RouteIdentity, Protocol):
    """What re-ranking reads of an overlay candidate (the gateway's `Candidate` fits)."""

    @property
    def admission(self) -> str: ...
    @property
    def tier(self) -> str | None: ...


C = TypeVar("C", bound=OverlayCandidate)


@dataclass(frozen=True)
class RerankContext:
    """The gateway's site, the sites' geography and the network's scoring settings.

    ``geographies`` maps a site name to its region and zone; a site missing
    from it has unknown geography (locality missing, tier ``cross_region``).
    ``config`` gives the weights and ceilings; its ``enabled`` flag is not read:
    the gateway scores even though the operator, under poll, does not.
    """

    local_site: str
    geographies: Mapping[str, Geography] = field(default_factory=dict)
    config: ScoringConfig = field(default_factory=ScoringConfig)

    def scoring(self) -> ScoringContext:
        """The scoring engine's view from the gateway's site."""
        return ScoringContext(self.local_site, self.geographies.get(self.local_site), self.config)

    def route_fields(self) -> dict[str, Any]:
        """The route filter's optional ``scoring`` and ``sites`` (poll mode, docs/gateway.md).

        `grid.gateway.config` reads them back into an equal context.
        """
        config = self.config
        weights = dict(zip(SIGNAL_NAMES, config.weights.as_tuple(), strict=True))
        sites: dict[str, Any] = {}
        for name in sorted(self.geographies):
            geo = self.geographies[name]
            known = {"region": geo.region, "zone": geo.zone}
            sites[name] = {k: v for k, v in known.items() if v is not None}
        return {
            "scoring": {
                "weights": weights,
                "latency_ceiling_ms": config.latency_ceiling_ms,
                "cost_ceiling_per_million_input_tokens": (
                    config.cost_ceiling_per_million_input_tokens
                ),
            },
            "sites": sites,
        }


_N = NEUTRAL_SIGNAL_SCORE
_ALL_MISSING = SignalScores(_N, _N, _N, _N, _N, _N, frozenset(SIGNAL_NAMES))
"""Every signal missing: what a candidate without a signals entry scores on."""


def _as_input(
    candidate: OverlayCandidate, entry: ProviderSignals, ctx: RerankContext
) -> CandidateInput:
    return CandidateInput(
        name=candidate.name,
        site=candidate.site,
        cluster=candidate.cluster,
        provider=entry.name,
        backend_kind=entry.backend_kind,
        signals=entry.signals,
        geography=ctx.geographies.get(candidate.site),
        healthy=entry.healthy is not False,
        fresh=candidate.fresh,
        observed_at=entry.observed_at,
        kind=candidate.kind,
    )


def signal_entries(signals: SignalsDocument) -> dict[tuple[str, str], list[ProviderSignals]]:
    """The document's entries by origin ``(site, cluster)``, in document order (for `entry_for`)."""
    by_route: dict[tuple[str, str], list[ProviderSignals]] = {}
    for entry in signals.providers:
        by_route.setdefault((entry.site, entry.cluster), []).append(entry)
    return by_route


def entry_for(
    candidate: OverlayCandidate, by_route: Mapping[tuple[str, str], list[ProviderSignals]]
) -> ProviderSignals | None:
    """The first entry of ``candidate``'s site and cluster that lists its model (or lists none)."""
    for entry in by_route.get((candidate.site, candidate.cluster), ()):
        if not entry.models or candidate.name in entry.models:
            return entry
    return None


def signal_scores_of(
    candidate: OverlayCandidate, entry: ProviderSignals | None, ctx: RerankContext
) -> SignalScores:
    """The six signal scores of ``candidate`` from its ``entry`` (all neutral without one)."""
    if entry is None:
        return _ALL_MISSING
    return signal_scores(_as_input(candidate, entry, ctx), ctx.scoring())


def breakdown_of(
    candidate: OverlayCandidate, entry: ProviderSignals | None, ctx: RerankContext
) -> ScoreBreakdown:
    """The §4 score of ``candidate`` and its six weighted contributions, as `score_of` ranks."""
    return blend(signal_scores_of(candidate, entry, ctx), ctx.config.weights)


def score_of(
    candidate: OverlayCandidate, entry: ProviderSignals | None, ctx: RerankContext
) -> float:
    """The §4 score of ``candidate`` from its signals ``entry`` (neutral 0.5 without one)."""
    return breakdown_of(candidate, entry, ctx).total


def group_key(candidate: OverlayCandidate, ctx: RerankContext) -> tuple[object, ...]:
    """Candidates move only among equals of this key.

    A candidate with a ``selection_group`` (§14) moves only inside it:
    (kind, name, group). Otherwise (admission, tier, freshness), with the
    overlay's tier when it names one, else the tier derived from geography,
    which is also how groups are derived when the overlay names none.
    """
    group = getattr(candidate, "selection_group", None)
    if isinstance(group, int) and group >= 0:
        return (candidate.kind, candidate.name, group)
    tier = candidate.tier
    if tier is None:
        probe = CandidateInput(
            name=candidate.name,
            site=candidate.site,
            cluster=candidate.cluster,
            provider=candidate.cluster,
            backend_kind=BackendKind.LOCAL,  # the tier reads sites only
            geography=ctx.geographies.get(candidate.site),
        )
        tier = selection_tier(probe, ctx.scoring()).value
    return (candidate.admission, tier, candidate.fresh)


def reported_requests(
    candidates: Sequence[OverlayCandidate], signals: SignalsDocument
) -> dict[str, float]:
    """Per candidate ``stable_id``: the waiting and running requests its signals entry
    reports (§14's load estimate); candidates without an entry or a count are left out."""
    by_route = signal_entries(signals)
    reported: dict[str, float] = {}
    for candidate in candidates:
        entry = entry_for(candidate, by_route)
        stable_id = getattr(candidate, "stable_id", None)
        if entry is not None and entry.requests is not None and isinstance(stable_id, str):
            reported[stable_id] = entry.requests
    return reported


def rerank(candidates: Sequence[C], signals: SignalsDocument, ctx: RerankContext) -> list[C]:
    """``candidates`` reordered by score within each group of equal `group_key`.

    Each group keeps the positions its members held in the overlay: group
    membership never changes where a group sits, only which member fills each
    of its slots. Ties keep overlay order. The result is a permutation of
    ``candidates``; with no signals entries at all it is ``candidates`` in order.
    """
    by_route = signal_entries(signals)
    keys = [group_key(c, ctx) for c in candidates]
    scores = [score_of(c, entry_for(c, by_route), ctx) for c in candidates]
    slots: dict[tuple[object, ...], list[int]] = {}
    for index, key in enumerate(keys):
        slots.setdefault(key, []).append(index)
    result: list[C] = list(candidates)
    for members in slots.values():
        ordered = sorted(members, key=lambda i: -scores[i])  # stable: ties keep overlay order
        for slot, index in zip(members, ordered, strict=True):
            result[slot] = candidates[index]
    return result
