"""Explanations: every candidate for one model, why it ranks where it does or is absent.

``grid explain`` answers "why does this model route there?". It renders the
same candidates as ``grid render`` (`grid.core.routing.render.evaluate_network`), keeps
the excluded ones, and for each ranked candidate names the sort key that put it
after the one above it: admission, tier, score, freshness, sample age or the
``(site, name, cluster)`` tie-break. Each ranked candidate also names its §14
selection group and why the group boundary falls where it does
(`grid.core.routing.groups.group_boundary`). Only names and numbers appear here; a
credential shows as its Secret reference, never a value.

Under ``signalTransport.mode: poll`` the operator does not score, so its rows
carry no score. Asked ``as_gateway``, the ranked rows are shown as the
poll-mode gateway ranks them instead (`grid.core.routing.gateway_order`): in
its order, with the scores it computes from the same signals document.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from grid.core.overlay import format_timestamp
from grid.core.routing.candidate import SignalValues
from grid.core.routing.gateway_order import GatewayRow, gateway_order
from grid.core.routing.groups import group_boundary
from grid.core.routing.render import (
    CandidateRow,
    Evaluated,
    RenderInputs,
    evaluate_network,
    gateway_ranking,
    select_gateway,
    select_network,
)
from grid.core.routing.scoring import Evaluation
from grid.core.routing.signals import SignalsDocument
from grid.core.vocabulary import SIGNAL_NAMES, CandidateKind, RoutingPolicy
from grid.errors import ValidationError

ScoredBy = Literal["operator", "gateway"]
"""Whose scores an explanation shows: the operator's (gossip) or the poll-mode gateway's."""

NO_ENTRY_NOTE = (
    "the gateway finds no signals entry for this site, cluster and model: "
    "every signal scores neutral 0.5"
)


@dataclass(frozen=True)
class ExplainRow:
    """One candidate of the explained model, ready for a table or JSON."""

    provider: str
    model: str
    site: str
    cluster: str
    backend_kind: str
    rank: int | None
    status: str
    admission_state: str
    selection_tier: str
    fresh: bool
    observed_at: str | None
    signal_values: dict[str, float | None]
    signal_scores: dict[str, float]
    missing_signals: tuple[str, ...]
    score: float | None
    score_breakdown: dict[str, float] | None
    credential: dict[str, Any] | None
    reason: str
    notes: tuple[str, ...]
    selection_group: int | None = None
    group_reason: str = ""
    """Why the candidate is in its selection group (empty when excluded)."""
    kind: str = CandidateKind.INFERENCE_MODEL.value
    """The candidate's kind (§5, §16); ``model`` is then the tool's or agent's name."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping of every field."""
        return {
            "kind": self.kind,
            "provider": self.provider,
            "model": self.model,
            "site": self.site,
            "cluster": self.cluster,
            "backend_kind": self.backend_kind,
            "rank": self.rank,
            "status": self.status,
            "admission_state": self.admission_state,
            "selection_tier": self.selection_tier,
            "fresh": self.fresh,
            "observed_at": self.observed_at,
            "signal_values": self.signal_values,
            "signal_scores": self.signal_scores,
            "missing_signals": list(self.missing_signals),
            "score": self.score,
            "score_breakdown": self.score_breakdown,
            "credential": self.credential,
            "reason": self.reason,
            "selection_group": self.selection_group,
            "group_reason": self.group_reason,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Explanation:
    """All candidates of one model as seen from one site, ranked ones first."""

    network: str
    local_site: str
    model: str
    """The model explained ("" when every model declaring ``capability`` is)."""
    scoring_enabled: bool
    rows: tuple[ExplainRow, ...]
    capability: str | None = None
    scored_by: ScoredBy | None = None
    """Who computed the scores shown; None under poll unless asked ``as_gateway``."""
    as_gateway: bool = False
    """Whether the gateway's view was asked for (only then is ``scored_by`` in `as_dict`)."""
    routing_policy: RoutingPolicy = RoutingPolicy.GEOGRAPHY_FIRST
    """The network's ``routingPolicy``, which decides the sort and the groups."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping."""
        document: dict[str, Any] = {
            "network": self.network,
            "local_site": self.local_site,
            "model": self.model,
            "capability": self.capability,
            "scoring_enabled": self.scoring_enabled,
            "routing_policy": self.routing_policy.value,
        }
        if self.as_gateway:
            document["scored_by"] = self.scored_by
        document["candidates"] = [row.as_dict() for row in self.rows]
        return document


def _who(evaluation: Evaluation) -> str:
    c = evaluation.candidate
    return f"{c.provider}@{c.site}"


def _sample(evaluation: Evaluation) -> str:
    observed = evaluation.candidate.observed_at
    return format_timestamp(observed) if observed else "no sample"


def decisive_difference(
    above: Evaluation, below: Evaluation, policy: RoutingPolicy = RoutingPolicy.GEOGRAPHY_FIRST
) -> str:
    """Why ``below`` sorts after ``above``: the first sort key that differs.

    The keys are checked in ``policy``'s order: under ``scoreFirst`` freshness
    comes right after admission (`grid.core.routing.ranking`).
    """
    a, b = above.candidate, below.candidate
    checks = [_admission, _tier, _score, _freshness]
    if policy is RoutingPolicy.SCORE_FIRST:
        checks = [_admission, _freshness, _tier, _score]
    for check in checks:
        reason = check(above, below)
        if reason is not None:
            return reason
    if (a.observed_at is None, a.observed_at) != (b.observed_at is None, b.observed_at):
        return f"its sample ({_sample(below)}) is older than {_sample(above)}"
    return "ties on admission, tier, score and freshness; (site, name, cluster) order decides"


def _admission(above: Evaluation, below: Evaluation) -> str | None:
    if above.admission is below.admission:
        return None
    return f"admission {below.admission.value} sorts after {above.admission.value}"


def _tier(above: Evaluation, below: Evaluation) -> str | None:
    if above.tier is below.tier:
        return None
    return f"tier {below.tier.value} sorts after {above.tier.value}"


def _score(above: Evaluation, below: Evaluation) -> str | None:
    if above.score is None or below.score is None or above.score == below.score:
        return None
    return f"score {below.score:.4f} is below {above.score:.4f}"


def _freshness(above: Evaluation, below: Evaluation) -> str | None:
    if above.candidate.fresh == below.candidate.fresh:
        return None
    return "it is not fresh and the candidate above is"


def _rank_reason(
    ordered: Sequence[CandidateRow],
    index: int,
    policy: RoutingPolicy = RoutingPolicy.GEOGRAPHY_FIRST,
) -> str:
    row = ordered[index].evaluation
    summary = f"{row.admission.value}, {row.tier.value}"
    if row.score is not None:
        summary += f", score {row.score:.4f}"
    if index == 0:
        text = f"first for this model ({summary})"
        if len(ordered) > 1:
            nxt = ordered[1].evaluation
            text += f"; ahead of {_who(nxt)} because {decisive_difference(row, nxt, policy)}"
        return text
    above = ordered[index - 1].evaluation
    return f"after {_who(above)} because {decisive_difference(above, row, policy)} ({summary})"


def _group_reasons(ranked: Sequence[CandidateRow], policy: RoutingPolicy) -> dict[int, str]:
    """Each ranked row's group reason, by overlay rank, computed per ``(kind, name)``."""
    by_model: dict[tuple[str, str], list[CandidateRow]] = {}
    for row in ranked:
        c = row.evaluation.candidate
        by_model.setdefault((c.kind, c.name), []).append(row)
    reasons: dict[int, str] = {}
    for rows in by_model.values():
        groups = [r.selection_group or 0 for r in rows]
        evaluations = [r.evaluation for r in rows]
        for i, row in enumerate(rows):
            if row.rank is not None:
                reasons[row.rank] = group_boundary(groups, evaluations, i, policy)
    return reasons


def _values(signals: SignalValues) -> dict[str, float | None]:
    return {
        "queue_depth": signals.queue_depth,
        "kv_cache_utilization": signals.kv_cache_utilization,
        "prefix_cache_hit_ratio": signals.prefix_cache_hit_ratio,
        "p99_latency_ms": signals.p99_latency_ms,
        "cost_per_million_input_tokens": signals.cost_per_million_input_tokens,
    }


def _gateway_row(scored: GatewayRow) -> ExplainRow:
    """A ranked row as the gateway sees it: its signals entry, its scores, its reason."""
    scores = scored.signal_scores
    notes = scored.row.notes if scored.entry is not None else (*scored.row.notes, NO_ENTRY_NOTE)
    return replace(
        _row(scored.row, scored.reason),
        signal_values=_values(scored.entry.signals if scored.entry else SignalValues()),
        signal_scores=dict(zip(SIGNAL_NAMES, scores.as_tuple(), strict=True)),
        missing_signals=tuple(n for n in SIGNAL_NAMES if n in scores.missing),
        score=scored.breakdown.total,
        score_breakdown=scored.breakdown.as_dict(),
        notes=notes,
    )


def _row(row: CandidateRow, reason: str) -> ExplainRow:
    evaluation = row.evaluation
    c = evaluation.candidate
    scores = evaluation.signal_scores
    credential = None
    if c.credential is not None:
        credential = {
            "strategy": c.credential.strategy,
            "secretRef": {
                "name": c.credential.secret_name,
                "namespace": c.credential.secret_namespace,
                "key": c.credential.secret_key,
            },
        }
    return ExplainRow(
        provider=c.provider,
        model=c.name,
        site=c.site,
        cluster=c.cluster,
        backend_kind=c.backend_kind.value,
        rank=row.rank,
        status=row.exclusion.value if row.exclusion else "ranked",
        admission_state=evaluation.admission.value,
        selection_tier=evaluation.tier.value,
        fresh=c.fresh,
        observed_at=format_timestamp(c.observed_at) if c.observed_at else None,
        signal_values=_values(c.signals),
        signal_scores=dict(zip(SIGNAL_NAMES, scores.as_tuple(), strict=True)),
        missing_signals=tuple(n for n in SIGNAL_NAMES if n in scores.missing),
        score=evaluation.score,
        score_breakdown=evaluation.breakdown.as_dict() if evaluation.breakdown else None,
        credential=credential,
        reason=reason,
        notes=row.notes,
        selection_group=row.selection_group,
        kind=c.kind,
    )


def explain(
    inputs: RenderInputs,
    *,
    site: str,
    model: str | None = None,
    signals: SignalsDocument | None = None,
    gateway: str | None = None,
    namespace: str | None = None,
    capability: str | None = None,
    as_gateway: bool = False,
    held: frozenset[tuple[str, str]] | None = None,
) -> Explanation:
    """Every candidate of ``model`` seen from ``site`` (or from ``gateway``'s site).

    With ``capability``, only models declaring it are candidates; without
    ``model`` every such model is explained. Ranked candidates come first in
    rank order, then excluded ones by provider. With ``as_gateway`` under poll
    mode, the ranked ones come in the poll-mode gateway's order instead, each
    with the score the gateway ranks it by (``rank`` stays the overlay's);
    under gossip it changes nothing, the operator's order being the gateway's.
    """
    if model is None and capability is None:
        raise ValidationError("explain needs a model or a capability", path="model")
    inputs = inputs.restricted(capability)
    if gateway is not None:
        network, local_name, _ = select_gateway(inputs.networks, gateway, namespace)
        local_site = local_name or site
    else:
        network = select_network(inputs.networks, inputs.sites, site)
        local_site = site
    evaluated = evaluate_network(inputs, network, local_site, site, signals, held=held)
    return explain_evaluated(
        evaluated, network.name, model, signals, capability=capability, as_gateway=as_gateway
    )


def explain_evaluated(
    evaluated: Evaluated,
    network: str,
    model: str | None,
    signals: SignalsDocument | None,
    *,
    capability: str | None = None,
    as_gateway: bool = False,
) -> Explanation:
    """`explain` of one model (every model when None) from an evaluation already made.

    One `evaluate_network` serves every model of a network this way, as in the
    live view, which explains them all each render round.
    """
    context = evaluated.context
    mine = [r for r in evaluated.rows if model is None or r.evaluation.candidate.name == model]
    ranked = sorted((r for r in mine if r.exclusion is None), key=lambda r: r.rank or 0)
    excluded = sorted(
        (r for r in mine if r.exclusion is not None),
        key=lambda r: (r.evaluation.candidate.provider, r.evaluation.candidate.site),
    )
    policy = evaluated.routing_policy
    ranking = gateway_ranking(evaluated) if as_gateway else None
    if ranking is None:
        out = [_row(r, _rank_reason(ranked, i, policy)) for i, r in enumerate(ranked)]
    else:
        out = [_gateway_row(g) for g in gateway_order(ranked, signals, ranking)]
    reasons = _group_reasons(ranked, policy)
    out = [
        replace(row, group_reason=reasons[row.rank]) if row.rank in reasons else row for row in out
    ]
    out += [_row(r, f"excluded ({r.exclusion}): {r.exclusion_detail}") for r in excluded]
    scored_by: ScoredBy | None = "operator" if context.config.enabled else None
    if ranking is not None:
        scored_by = "gateway"
    return Explanation(
        network,
        context.local_site,
        model or "",
        context.config.enabled,
        tuple(out),
        capability,
        scored_by,
        as_gateway,
        policy,
    )
