"""Rendering: Grid resources plus a signals document into a ranked overlay (§4a).

This is the pure function behind ``grid render`` and ``grid explain``. It turns
typed resources (GridNetwork, GridSite, InferenceProvider, core v1 Secret) and
an optional signals document into scoring inputs, one per (provider, model)
(`grid.core.routing.candidate_draft`), ranks them with `grid.core.routing.ranking` and builds
the overlay and its envelope with `grid.core.overlay`. Nothing here reads a
clock or a file: ``now`` is an input.

Candidates removed before scoring keep their evaluation so that ``explain`` can
show every candidate, including excluded ones, with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from operator import attrgetter
from typing import Any

from grid import __version__
from grid.core.overlay import (
    CANDIDATES_MAX,
    Provenance,
    Scope,
    Selection,
)
from grid.core.overlay.document import build_overlay_parts
from grid.core.overlay.file_text import FileTexts, file_texts
from grid.core.resources import (
    AgentProvider,
    AgentToolProvider,
    GridNetwork,
    GridSite,
    InferenceProvider,
)
from grid.core.resources.secret import Secret
from grid.core.routing.admission_policy import admission_thresholds
from grid.core.routing.agent_candidates import AgentRoute, agent_draft, routes_of
from grid.core.routing.candidate import CandidateInput, ExclusionReason, Geography
from grid.core.routing.candidate_draft import (
    CandidateDraft,
    DraftView,
    check_duplicates,
    drafts_for,
    own_geography,
    site_geographies,
)
from grid.core.routing.capability import provider_with_capability
from grid.core.routing.gateway_select import DEFAULT_NAMESPACE, select_gateway, select_network
from grid.core.routing.group_cache import GroupCache
from grid.core.routing.groups import assign_groups
from grid.core.routing.ranking import (
    Ordering,
    RankedCandidate,
    Ranking,
    exclusion_detail,
    order_candidates,
)
from grid.core.routing.render_cache import RenderCache
from grid.core.routing.rerank import RerankContext
from grid.core.routing.scoring import (
    Evaluation,
    ScoringConfig,
    ScoringContext,
    ScoringWeights,
    evaluate,
)
from grid.core.routing.signals import SignalsDocument
from grid.core.vocabulary import CandidateKind, RoutingPolicy
from grid.errors import ValidationError

# `ExclusionReason` is defined with the candidates and is part of this module's interface too.
__all__ = [
    "DEFAULT_NAMESPACE",
    "CandidateRow",
    "Evaluated",
    "ExclusionReason",
    "RenderInputs",
    "Rendered",
    "evaluate_network",
    "gateway_ranking",
    "own_geography",
    "poll_ranking",
    "render",
    "scoring_config",
    "select_gateway",
    "select_network",
    "site_geographies",
]

INFERENCE_CAPABILITY = "inference"
"""``--capability inference``: every model, no tool or agent."""
AGENT_CAPABILITIES = {
    "agentTools": CandidateKind.MCP_TOOL,
    "agentToAgent": CandidateKind.A2A_AGENT,
}
"""Upstream's site capability names of tools and agents, and their candidate kinds."""


@dataclass(frozen=True)
class RenderInputs:
    """The resources a render reads. Order does not matter; names must be unique."""

    networks: Sequence[GridNetwork] = ()
    sites: Sequence[GridSite] = ()
    providers: Sequence[InferenceProvider] = ()
    secrets: Sequence[Secret] = ()
    agents: Sequence[AgentProvider] = ()
    """AgentToolProviders and AgentToAgentProviders (§16), as resources."""
    offers: Sequence[AgentRoute] = ()
    """Tools and agents other sites offer in their OR-Sets (`offer_routes`)."""

    def restricted(self, capability: str | None) -> RenderInputs:
        """These inputs restricted to one capability (the same for None).

        Upstream's site capability names choose a candidate kind: ``inference``
        keeps the models, ``agentTools`` the tools and ``agentToAgent`` the
        agents. Any other name keeps only the models declaring it.
        """
        if capability is None:
            return self
        kind = AGENT_CAPABILITIES.get(capability)
        if kind is not None:
            tools = kind is CandidateKind.MCP_TOOL
            return replace(
                self,
                providers=(),
                agents=tuple(a for a in self.agents if isinstance(a, AgentToolProvider) == tools),
                offers=tuple(o for o in self.offers if o.kind is kind),
            )
        if capability == INFERENCE_CAPABILITY:
            return replace(self, agents=(), offers=())
        kept = [provider_with_capability(p, capability) for p in self.providers]
        providers = tuple(p for p in kept if p is not None)
        return replace(self, providers=providers, agents=(), offers=())


@dataclass(frozen=True)
class CandidateRow:
    """One candidate with everything ``explain`` shows about it.

    ``rank`` is the overlay rank and ``selection_group`` its §14 group (both
    ``None`` when excluded); ``exclusion`` and ``exclusion_detail`` say why a
    candidate is missing from the overlay.
    """

    evaluation: Evaluation
    provider: InferenceProvider | AgentRoute
    rank: int | None = None
    selection_group: int | None = None
    exclusion: ExclusionReason | None = None
    exclusion_detail: str = ""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Evaluated:
    """Every candidate of one network seen from one site, scored and ranked.

    ``kept`` is what the overlay carries: the top ``candidates_max`` ranked
    candidates (all of them when ``None``). ``rows`` (computed on first use)
    describes every candidate, kept or not, for ``explain``.
    """

    drafts: tuple[CandidateDraft, ...]
    ordering: Ordering
    context: ScoringContext
    candidates_max: int | None
    routing_policy: RoutingPolicy = RoutingPolicy.GEOGRAPHY_FIRST
    group_cache: GroupCache | None = field(default=None, compare=False, repr=False)
    """A render cache's groups of the last round (`grid.core.routing.group_cache`)."""

    @property
    def ranking(self) -> Ranking:
        """Every ranked and excluded candidate (built on first use)."""
        return self.ordering.ranking

    @property
    def kept(self) -> tuple[RankedCandidate, ...]:
        """The ranked candidates the overlay carries, in rank order."""
        return self.ordering.top(self.candidates_max)

    @cached_property
    def groups(self) -> tuple[int, ...]:
        """Each kept candidate's ``selection_group``, in rank order (§14)."""
        if self.group_cache is not None:
            return self.group_cache.groups(self.kept, self.routing_policy)
        return assign_groups(self.kept, self.routing_policy)

    @cached_property
    def rows(self) -> tuple[CandidateRow, ...]:
        """Ranked rows in rank order, then scoring exclusions, then earlier exclusions."""
        return _rows(self)


@dataclass(frozen=True)
class Rendered:
    """A render's results: the overlay, its envelope and every candidate row."""

    network: GridNetwork
    scope: Scope
    overlay: dict[str, Any]
    envelope: dict[str, Any]
    evaluated: Evaluated
    candidates_text: str | None = None
    """The candidates' canonical text (`grid.core.overlay.document.BuiltOverlay`)."""
    candidates_literal: str | None = None
    """That text as the inside of a JSON string literal, when the render cache kept it."""

    @cached_property
    def file_texts(self) -> FileTexts:
        """The file text of the overlay and of the envelope, and their JSON string
        literals when known (`grid.core.overlay.file_text`)."""
        return file_texts(
            self.overlay, self.envelope, self.candidates_text, self.candidates_literal
        )

    @cached_property
    def file_lines(self) -> FileTexts:
        """`file_texts` with each file's closing newline, as the operator writes them."""
        return file_texts(
            self.overlay, self.envelope, self.candidates_text, self.candidates_literal, "\n"
        )

    @property
    def texts(self) -> tuple[str, str]:
        """The file text of the overlay and of the envelope (`grid.core.overlay.file_text`)."""
        texts = self.file_texts
        return texts.config, texts.envelope

    @property
    def rows(self) -> tuple[CandidateRow, ...]:
        """Every candidate, including excluded ones."""
        return self.evaluated.rows

    @property
    def scoring_enabled(self) -> bool:
        """False under ``signalTransport.mode: poll``."""
        return self.evaluated.context.config.enabled


def scoring_config(
    network: GridNetwork, held: frozenset[tuple[str, str]] | None = None
) -> ScoringConfig:
    """The scoring engine's settings from ``GridNetwork.spec`` (§2, and §2a's policies).

    ``held`` is the operator's stabilized-admission hold set
    (`grid.core.routing.hysteresis`); ``grid render`` passes none.
    """
    spec = network.spec
    weights = spec.effective_weights
    return ScoringConfig(
        weights=ScoringWeights(
            locality=weights.locality,
            queue_depth=weights.queue_depth,
            kv_cache=weights.kv_cache,
            prefix_cache=weights.prefix_cache,
            latency=weights.latency,
            cost=weights.cost,
        ),
        latency_ceiling_ms=spec.scoring.latency_ceiling_ms,
        cost_ceiling_per_million_input_tokens=spec.scoring.cost_ceiling_per_million_input_tokens,
        admission=admission_thresholds(spec, held),
        enabled=spec.signal_mode != "poll",
    )


def poll_ranking(rendered: Rendered) -> RerankContext | None:
    """What a poll-mode gateway scores pulled signals with, or None under gossip."""
    return gateway_ranking(rendered.evaluated)


def gateway_ranking(evaluated: Evaluated) -> RerankContext | None:
    """`poll_ranking` of a render's evaluation (``grid explain`` has no overlay to read).

    The network's weights and ceilings (scoring enabled: the gateway scores
    even though the operator does not) and the geography of the gateway's site
    and of every site a kept candidate sits at. None under gossip.
    """
    context = evaluated.context
    if context.config.enabled:
        return None
    geographies: dict[str, Geography] = {}
    if context.local_geography is not None:
        geographies[context.local_site] = context.local_geography
    for ranked in evaluated.kept:
        candidate = ranked.evaluation.candidate
        if candidate.geography is not None:
            geographies.setdefault(candidate.site, candidate.geography)
    config = replace(context.config, enabled=True)
    return RerankContext(context.local_site, geographies, config)


def evaluate_network(
    inputs: RenderInputs,
    network: GridNetwork,
    local_site: str,
    default_site: str,
    signals: SignalsDocument | None,
    candidates_max: int | None = CANDIDATES_MAX,
    held: frozenset[tuple[str, str]] | None = None,
    cache: RenderCache | None = None,
) -> Evaluated:
    """Every candidate of ``network`` seen from ``local_site``, scored and ranked.

    ``held``: the stabilized-admission hold set, as for `scoring_config`. With
    ``cache``, drafts and evaluations whose inputs held since its last render are kept.
    """
    if signals is not None and signals.network != network.name:
        raise ValidationError(
            f"the signals document is for network {signals.network!r}, not {network.name!r}",
            path="network",
        )
    name = network.name
    sites = {s.name: s for s in inputs.sites if s.spec.grid_network_ref == name}
    index = signals.index() if signals else {}
    geographies = site_geographies(network, sites, default_site)
    view = DraftView(
        network,
        local_site,
        default_site,
        sites,
        inputs.secrets,
        signals,
        index,
        geographies,
        network.spec.stale_candidate_ttl_seconds,
    )
    if cache is None:
        providers = sorted(
            (p for p in inputs.providers if p.spec.grid_network_ref == name),
            key=_by_name,
        )
        drafts = tuple([d for p in providers for d in drafts_for(p, view)])
    else:
        drafts = tuple(cache.drafts(cache.by_name(inputs.providers, name), view))
    routes = routes_of(inputs.agents, inputs.offers, sites, name, default_site)
    drafts += tuple(agent_draft(r, view) for r in routes)
    check_duplicates(drafts)
    context = ScoringContext(local_site, geographies.get(local_site), scoring_config(network, held))
    # Each eligible draft is one group: its candidates share one evaluation.
    eligible = [d.candidates for d in drafts if d.exclusion is None]
    policy = network.spec.effective_routing_policy
    if cache is None:
        ordering = order_candidates(eligible, context, policy)
    else:
        ordering = cache.ordered(eligible, context, policy)
    groups = None if cache is None else cache.groups
    return Evaluated(drafts, ordering, context, candidates_max, policy, groups)


_by_name = attrgetter("metadata.name")


def _rows(evaluated: Evaluated) -> tuple[CandidateRow, ...]:
    context = evaluated.context
    limit = evaluated.candidates_max
    # check_duplicates made (kind, name, site, cluster) name one candidate of one draft.
    owner = {_route(c): d for d in evaluated.drafts for c in d.candidates}
    rows: list[CandidateRow] = []
    groups = evaluated.groups
    for r in evaluated.ranking.ranked:
        draft = owner[_route(r.evaluation.candidate)]
        over = limit is not None and r.rank >= limit
        rows.append(
            CandidateRow(
                evaluation=r.evaluation,
                provider=draft.provider,
                rank=None if over else r.rank,
                selection_group=None if over else groups[r.rank],
                exclusion=ExclusionReason.CANDIDATE_LIMIT if over else None,
                exclusion_detail=f"ranked beyond the {limit}-candidate overlay limit"
                if over
                else "",
                notes=draft.notes,
            )
        )
    for x in evaluated.ranking.excluded:
        draft = owner[_route(x.evaluation.candidate)]
        rows.append(
            CandidateRow(
                evaluation=x.evaluation,
                provider=draft.provider,
                exclusion=x.reason,
                exclusion_detail=exclusion_detail(x.evaluation, context),
                notes=draft.notes,
            )
        )
    for draft in evaluated.drafts:
        if draft.exclusion is None:
            continue
        for candidate in draft.candidates:
            rows.append(
                CandidateRow(
                    evaluation=evaluate(candidate, context),
                    provider=draft.provider,
                    exclusion=draft.exclusion,
                    exclusion_detail=draft.detail,
                    notes=draft.notes,
                )
            )
    return tuple(rows)


def _route(candidate: CandidateInput) -> tuple[str, str, str, str]:
    return candidate.kind, candidate.name, candidate.site, candidate.cluster


def render(
    inputs: RenderInputs,
    *,
    site: str,
    gateway: str,
    now: datetime,
    namespace: str | None = None,
    signals: SignalsDocument | None = None,
    producer_version: str = __version__,
    candidates_max: int | None = CANDIDATES_MAX,
    held: frozenset[tuple[str, str]] | None = None,
    capability: str | None = None,
    cache: RenderCache | None = None,
) -> Rendered:
    """Render the overlay and envelope for ``gateway`` (``grid render``).

    ``site`` is the operator's site: the default for providers without a site
    label and for a gatewayRef without ``localSiteName``. ``now`` stamps
    ``generated_at`` and ``rendered_at``; it never changes the revision.
    ``candidates_max`` keeps the top-ranked candidates only (default 1,024, the
    §5 limit, so the overlay always verifies); ``None`` keeps every candidate.
    ``held`` is the operator's stabilized-admission hold set (none in ``grid render``).
    ``capability`` keeps only models that declare it (`RenderInputs.restricted`).
    ``cache`` (one per gateway) keeps what did not change for the next render.
    """
    inputs = inputs.restricted(capability)
    network, local_site_name, resolved_namespace = select_gateway(
        inputs.networks, gateway, namespace
    )
    local_site = local_site_name or site
    evaluated = evaluate_network(
        inputs, network, local_site, site, signals, candidates_max, held, cache
    )
    scope = Scope(network.name, gateway, resolved_namespace, local_site)
    provenance = Provenance(
        producer_version=producer_version,
        source_name=network.name,
        source_uid=network.metadata.uid,
        source_generation=network.metadata.generation,
        rendered_at=now,
    )
    selection = Selection.for_mode(network.spec.selection_mode, evaluated.groups)
    built = build_overlay_parts(
        network.name,
        local_site,
        evaluated.kept,
        now,
        scope,
        provenance,
        selection,
        cache.candidates if cache is not None else None,
    )
    return Rendered(
        network,
        scope,
        built.overlay,
        built.envelope,
        evaluated,
        built.candidates_text,
        built.candidates_literal,
    )
