"""One site's live view, and the merge of many sites' views into one.

A view is plain JSON-ready data keyed by *observer* (the site that saw it), so
that the views of several sites merge by union: `merge_views` of the demo's
three sites lines up, for each member, the state every site holds, and for each
origin and lane, the revision every site holds. Converged lanes show one
revision across the row; a partition shows them drifting apart.

The scoring section is built from `grid.core.routing.explain.Explanation`, the
same data ``grid explain`` prints: the six weighted contributions of each ranked
candidate are its ``score_breakdown``, and the written reason is explain's. The
operator asks for the gateway's view (``grid explain --as-gateway``), so under
poll mode, where the operator does not score, the bars are the gateway's and
each model says so in ``scored_by``.

Each candidate also carries its ``group`` (``selection_group``, §14) with explain's
``group_reason``, and its ``selections``: the first-attempt selections this site's
gateways made of its (cluster, group) in the last minute
(`grid.core.live.selections`), with ``share``, its part of the selections of
all the model's candidates (None while they have none). The gateways count per
cluster and group, not per model, so a cluster that serves two models in the
same group shares one count between them.
Tools and agents stand beside the models: each ranked entry carries its ``kind``
(``inference_model``, ``mcp_tool`` or ``a2a_agent``, §16), models first, then
tools, then agents, each by name.
Credentials never enter a view: a candidate carries names and numbers only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grid.core.live.activity import ACTIVITY_MAX
from grid.core.live.selections import WINDOW_S, SelectionKey
from grid.core.routing.explain import ExplainRow, Explanation, explain_evaluated
from grid.core.routing.render import RenderInputs, evaluate_network, select_network
from grid.core.routing.signals import SignalsDocument
from grid.core.swim.members import Member
from grid.core.vocabulary import SIGNAL_NAMES, CandidateKind

View = dict[str, Any]
"""A live view: ``generated_at``, ``sites``, ``unreachable``, ``members``, ``activity``,
``transport``, ``lanes``, ``ranking``, ``traffic`` and ``budgets``."""


@dataclass(frozen=True)
class SiteInputs:
    """What one operator knows, gathered by its wiring for `site_view`."""

    observer: str
    generated_at: str
    incarnation: int
    """The observer's own SWIM incarnation (it is alive to itself)."""
    members: Sequence[Member] = ()
    activity: Sequence[Mapping[str, Any]] = ()
    transport: Mapping[str, int] = field(default_factory=dict)
    """Probe traffic counters (datagrams and push-pull exchanges sent and received)."""
    lanes: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Origin → lane → the revision this observer holds."""
    explanations: Sequence[Explanation] = ()
    traffic: Mapping[str, int] = field(default_factory=dict)
    """Requests per candidate (``provider@site`` or cluster) routed by this site's gateways."""
    budgets: Sequence[Mapping[str, Any]] | None = None
    """``status.budgetStatus`` items when the network has any."""
    selections: Mapping[SelectionKey, int] = field(default_factory=dict)
    """First-attempt selections per (cluster, group) by this site's gateways, last minute."""
    mode: str = ""
    """The signal transport mode this site runs."""
    mismatched: Sequence[tuple[str, str]] = ()
    """(site, mode) of each peer gossiping another signal mode (``SignalTransportMismatch``)."""


def candidate_view(
    row: ExplainRow, position: int | None, selections: int = 0, share: float | None = None
) -> dict[str, Any]:
    """One candidate of the scoring panel: a bar of six contributions and its reason.

    ``position`` is its place among the model's ranked candidates (1 first, None
    when excluded); ``rank`` stays the overlay's rank, as ``grid explain`` shows it.
    ``selections`` and ``share`` are its last minute's selections and their share.
    """
    breakdown = row.score_breakdown or {}
    return {
        "position": position,
        "kind": row.kind,
        "provider": row.provider,
        "site": row.site,
        "cluster": row.cluster,
        "rank": row.rank,
        "status": row.status,
        "admission": row.admission_state,
        "tier": row.selection_tier,
        "fresh": row.fresh,
        "observed_at": row.observed_at,
        "score": row.score,
        "contributions": {name: breakdown[name] for name in SIGNAL_NAMES if name in breakdown},
        "missing_signals": list(row.missing_signals),
        "reason": row.reason,
        "group": row.selection_group,
        "group_reason": row.group_reason,
        "selections": selections,
        "share": share,
    }


def _selections_of(row: ExplainRow, selections: Mapping[SelectionKey, int]) -> int:
    if row.rank is None or row.selection_group is None:
        return 0
    return selections.get((row.cluster, row.selection_group), 0)


def ranking_view(
    explanation: Explanation, selections: Mapping[SelectionKey, int] | None = None
) -> dict[str, Any]:
    """One model's ranked (then excluded) candidates, in explain's order, with each
    ranked candidate's group and its share of the model's last-minute selections."""
    counts = [_selections_of(row, selections or {}) for row in explanation.rows]
    total = sum(counts)
    return {
        "model": explanation.model,
        "kind": _kind(explanation),
        "scoring_enabled": explanation.scoring_enabled,
        "scored_by": explanation.scored_by,
        "selections": total,
        "window_s": WINDOW_S,
        "candidates": [
            candidate_view(
                row,
                None if row.rank is None else i + 1,
                counts[i],
                counts[i] / total if total and row.rank is not None else None,
            )
            for i, row in enumerate(explanation.rows)
        ],
    }


def site_view(inputs: SiteInputs) -> View:
    """The view one operator serves at ``/ui/state.json``."""
    me = inputs.observer
    members = {m.id: {"state": m.state.value, "incarnation": m.incarnation} for m in inputs.members}
    members[me] = {"state": "alive", "incarnation": inputs.incarnation}
    return {
        "generated_at": inputs.generated_at,
        "sites": [me],
        "unreachable": [],
        "members": [{"id": mid, "views": {me: members[mid]}} for mid in sorted(members)],
        "activity": [dict(a) for a in inputs.activity][:ACTIVITY_MAX],
        "transport": {me: dict(inputs.transport)},
        "lanes": [
            {"origin": origin, "lane": lane, "revisions": {me: revision}}
            for origin in sorted(inputs.lanes)
            for lane, revision in sorted(inputs.lanes[origin].items())
        ],
        "ranking": {
            me: [
                ranking_view(e, inputs.selections) for e in sorted(inputs.explanations, key=_order)
            ]
        },
        "traffic": {me: dict(sorted(inputs.traffic.items()))},
        "budgets": {} if inputs.budgets is None else {me: [dict(b) for b in inputs.budgets]},
        "modes": {
            me: {
                "mode": inputs.mode,
                "mismatched": [{"site": s, "mode": m} for s, m in inputs.mismatched],
            }
        },
    }


_KIND_ORDER = {kind.value: i for i, kind in enumerate(CandidateKind)}


def _kind(explanation: Explanation) -> str:
    """The kind of an explanation's candidates (a model when it has none)."""
    rows = explanation.rows
    return rows[0].kind if rows else CandidateKind.INFERENCE_MODEL.value


def _order(explanation: Explanation) -> tuple[int, str]:
    """Models first, then tools, then agents, each by name."""
    return _KIND_ORDER.get(_kind(explanation), len(_KIND_ORDER)), explanation.model


def empty_view(generated_at: str, unreachable: Iterable[str] = ()) -> View:
    """A view with no observer (what the aggregate shows before any site answers)."""
    return {
        "generated_at": generated_at,
        "sites": [],
        "unreachable": sorted(set(unreachable)),
        "members": [],
        "activity": [],
        "transport": {},
        "lanes": [],
        "ranking": {},
        "traffic": {},
        "budgets": {},
        "modes": {},
    }


def _union_rows(views: Sequence[View], section: str, key: tuple[str, ...]) -> list[Any]:
    """Rows of ``section`` joined on ``key``, their per-observer mappings merged."""
    inner = "revisions" if section == "lanes" else "views"
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for view in views:
        for row in view.get(section, []):
            k = tuple(row[name] for name in key)
            merged = rows.setdefault(k, {**{n: row[n] for n in key}, inner: {}})
            merged[inner].update(row[inner])
    return [rows[k] for k in sorted(rows)]


def merge_views(views: Sequence[View], generated_at: str, unreachable: Iterable[str] = ()) -> View:
    """One view of many observers: members and lanes lined up per site.

    ``unreachable`` names observers whose view could not be read; their own
    column then stays empty while the others' columns show how they see them.
    """
    merged = empty_view(generated_at, unreachable)
    sites = sorted({s for v in views for s in v.get("sites", [])})
    merged["sites"] = sites
    merged["unreachable"] = sorted(
        {*merged["unreachable"], *(u for v in views for u in v.get("unreachable", []))} - set(sites)
    )
    merged["members"] = _union_rows(views, "members", ("id",))
    merged["lanes"] = _union_rows(views, "lanes", ("origin", "lane"))
    activity = [a for v in views for a in v.get("activity", [])]
    activity.sort(key=lambda a: (a["at"], a["observer"], a["member"]), reverse=True)
    merged["activity"] = activity[:ACTIVITY_MAX]
    for section in ("transport", "ranking", "traffic", "budgets", "modes"):
        for view in views:
            merged[section].update(view.get(section, {}))
    return merged


def explain_all(
    inputs: RenderInputs,
    site: str,
    signals: SignalsDocument | None = None,
    *,
    as_gateway: bool = False,
    held: frozenset[tuple[str, str]] | None = None,
) -> list[Explanation]:
    """``grid explain`` (``--as-gateway`` with ``as_gateway``) for every model ``site`` sees.

    Sorted by model name. ``held`` is the stabilized-admission hold set the
    render round used, so the admission shown is the overlay's.
    """
    network = select_network(inputs.networks, inputs.sites, site)
    evaluated = evaluate_network(inputs, network, site, site, signals, held=held)
    models = {row.evaluation.candidate.name for row in evaluated.rows}
    return [
        explain_evaluated(evaluated, network.name, m, signals, as_gateway=as_gateway)
        for m in sorted(models)
    ]
