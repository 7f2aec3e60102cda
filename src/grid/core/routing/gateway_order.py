"""The poll-mode gateway's order of explained candidates, and the scores it ranks by.

Under ``signalTransport.mode: poll`` the operator does not score: its overlay is
ordered by admission, tier, freshness and the tie-break, and the gateway
re-ranks each (admission, tier, freshness) group by the §4 score of the signals
it pulls (`grid.core.routing.rerank`). ``grid explain --as-gateway`` and the
live view show that order. This module hands the overlay's ranked candidates
to the gateway's own `rerank`, `entry_for` and `breakdown_of`, so the order
and the numbers shown are the ones the gateway computes, and states why each
candidate sits after the one above it: the group key first, then the score,
then the overlay order for equal scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from grid.core.routing.render import CandidateRow
from grid.core.routing.rerank import (
    RerankContext,
    breakdown_of,
    entry_for,
    rerank,
    signal_entries,
    signal_scores_of,
)
from grid.core.routing.scoring import SignalScores
from grid.core.routing.signals import ProviderSignals, SignalsDocument
from grid.core.vocabulary import ScoreBreakdown

__all__ = ["GatewayRow", "gateway_order"]


@dataclass(frozen=True)
class _OverlayView:
    """A ranked row as the gateway reads it from the overlay (an `OverlayCandidate`)."""

    row: CandidateRow

    @property
    def kind(self) -> str:
        return self.row.evaluation.candidate.kind

    @property
    def name(self) -> str:
        return self.row.evaluation.candidate.name

    @property
    def site(self) -> str:
        return self.row.evaluation.candidate.site

    @property
    def cluster(self) -> str:
        return self.row.evaluation.candidate.cluster

    @property
    def fresh(self) -> bool:
        return self.row.evaluation.candidate.fresh

    @property
    def admission(self) -> str:
        return self.row.evaluation.admission.value

    @property
    def tier(self) -> str | None:
        return self.row.evaluation.tier.value


@dataclass(frozen=True)
class GatewayRow:
    """One ranked candidate as the poll-mode gateway scores it, and why it sits there."""

    row: CandidateRow
    entry: ProviderSignals | None
    """The pulled signals entry it matched; None: every signal scores neutral 0.5."""
    signal_scores: SignalScores
    breakdown: ScoreBreakdown
    reason: str = ""


def gateway_order(
    ranked: Sequence[CandidateRow], signals: SignalsDocument | None, ctx: RerankContext
) -> list[GatewayRow]:
    """``ranked`` (in overlay order) as the gateway orders it, each with its scores and reason.

    Without a signals document the gateway has nothing to re-rank by: it keeps
    the overlay order, and every candidate scores neutral.
    """
    views = [_OverlayView(row) for row in ranked]
    if signals is not None:
        views = rerank(views, signals, ctx)
    by_route = signal_entries(signals) if signals is not None else {}
    scored = []
    for view in views:
        entry = entry_for(view, by_route)
        scores = signal_scores_of(view, entry, ctx)
        scored.append(GatewayRow(view.row, entry, scores, breakdown_of(view, entry, ctx)))
    return [replace(row, reason=_reason(scored, i)) for i, row in enumerate(scored)]


def _who(row: GatewayRow) -> str:
    c = row.row.evaluation.candidate
    return f"{c.provider}@{c.site}"


def _scores(above: float, below: float) -> tuple[str, str]:
    """Both scores to four places, or in full when four places would show them equal."""
    a, b = f"{above:.4f}", f"{below:.4f}"
    return (a, b) if a != b else (repr(above), repr(below))


def gateway_difference(above: GatewayRow, below: GatewayRow) -> str:
    """Why the gateway puts ``below`` after ``above``: the first key that differs."""
    a, b = above.row.evaluation, below.row.evaluation
    if a.admission != b.admission:
        return f"admission {b.admission.value} sorts after {a.admission.value}"
    if a.tier != b.tier:
        return f"tier {b.tier.value} sorts after {a.tier.value}"
    if a.candidate.fresh != b.candidate.fresh:
        return "it is not fresh and the candidate above is"
    if above.breakdown.total != below.breakdown.total:
        high, low = _scores(above.breakdown.total, below.breakdown.total)
        return f"the gateway's score {low} is below {high}"
    return (
        "ties on admission, tier, freshness and the gateway's score; "
        f"overlay order decides (rank {above.row.rank} before {below.row.rank})"
    )


def _summary(row: GatewayRow) -> str:
    evaluation = row.row.evaluation
    fresh = "fresh" if evaluation.candidate.fresh else "not fresh"
    return (
        f"{evaluation.admission.value}, {evaluation.tier.value}, {fresh}, "
        f"gateway score {row.breakdown.total:.4f}"
    )


def _reason(ordered: Sequence[GatewayRow], index: int) -> str:
    row = ordered[index]
    if index == 0:
        text = f"first for this model as the poll-mode gateway ranks it ({_summary(row)})"
        if len(ordered) > 1:
            nxt = ordered[1]
            text += f"; ahead of {_who(nxt)} because {gateway_difference(row, nxt)}"
        return text
    above = ordered[index - 1]
    return f"after {_who(above)} because {gateway_difference(above, row)} ({_summary(row)})"
