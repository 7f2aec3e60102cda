"""Tool and agent candidates: ``mcp_tool`` and ``a2a_agent`` drafts of a render (§16).

An AgentToolProvider contributes one ``mcp_tool`` candidate per tool (named by the
tool) and an AgentToAgentProvider one ``a2a_agent`` candidate (named by the
agent, its provider's name), at each site hosting it, routed through the
provider's name as cluster. They come from two places, as models do: this site's
own resources (`resource_routes`, which keep the ``auth`` and so can carry a
credential reference) and the ``tools``/``agents`` OR-Sets of the other sites
(`offer_routes`, which carry the access labels the consuming site enforces).

Both become an `AgentRoute`, and `agent_draft` drafts it exactly as
`grid.core.routing.candidate_draft` drafts a provider: the access policy and an
``Unavailable`` phase exclude it before scoring, ``Degraded`` makes it not fresh,
and a credential reference is checked against the Secrets. Tools and agents
publish no signals, so every signal but locality is missing and scores neutral
0.5; ranking and §14's groups then treat them like models.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from grid.core.crdt.offer import AgentOffer
from grid.core.resources import (
    AgentProvider,
    AgentToolProvider,
    GridSite,
    ProviderAuth,
    hosting_sites,
)
from grid.core.resources.phases import ProviderPhase
from grid.core.routing.candidate import ExclusionReason, SignalValues, provider_candidates
from grid.core.routing.candidate_draft import (
    CandidateDraft,
    DraftView,
    access_problem,
    credential_ref,
)
from grid.core.vocabulary import BackendKind, CandidateKind

__all__ = ["AgentRoute", "agent_draft", "offer_routes", "resource_routes", "routes_of"]

_NO_SIGNALS = SignalValues()


@dataclass(frozen=True)
class AgentRoute:
    """One tool provider or agent at one site, as a render drafts it."""

    kind: CandidateKind
    """``mcp_tool`` or ``a2a_agent``."""
    provider: str
    """The provider's name: its routing cluster."""
    names: tuple[str, ...]
    """The tools it serves, or the agent's own name."""
    site: str
    access: tuple[tuple[str, str], ...] = ()
    """``accessPolicy.siteSelector.matchLabels``, sorted; empty admits every site."""
    phase: ProviderPhase = ProviderPhase.AVAILABLE
    auth: ProviderAuth | None = None
    """Own resources only: a peer's Secret lives in its cluster."""

    @property
    def resource_kind(self) -> str:
        """The kind of the resource it stands for."""
        return (
            "AgentToolProvider" if self.kind is CandidateKind.MCP_TOOL else "AgentToAgentProvider"
        )


def served_names(provider: AgentProvider) -> tuple[str, ...]:
    """The tools a tool provider serves (its spec's, else the discovered ones), or the
    agent's name."""
    if not isinstance(provider, AgentToolProvider):
        return (provider.name,)
    tools = provider.spec.tools or (provider.status.tools if provider.status else [])
    return tuple(t.name for t in tools)


def resource_routes(
    provider: AgentProvider, sites: Iterable[GridSite], default_site: str
) -> list[AgentRoute]:
    """One route per site hosting ``provider`` (§2a: its siteSelector, else its site
    label, else ``default_site``)."""
    if provider.spec.hosting_labels:
        where = hosting_sites(provider, sites)
    else:
        where = [provider.site_label or default_site]
    policy = provider.spec.access_policy
    access = tuple(sorted(policy.site_selector.match_labels.items())) if policy else ()
    kind = (
        CandidateKind.MCP_TOOL
        if isinstance(provider, AgentToolProvider)
        else CandidateKind.A2A_AGENT
    )
    names = served_names(provider)
    return [
        AgentRoute(kind, provider.name, names, site, access, provider.phase, provider.spec.auth)
        for site in where
    ]


def offer_routes(offers: Iterable[tuple[str, AgentOffer]]) -> list[AgentRoute]:
    """The routes the other sites' OR-Set offers describe, by (site, provider), sorted.

    An offer is in an OR-Set only while its provider is Available or Degraded, so
    each route is Available. Offers of one provider that disagree on the access
    labels keep the strictest: the union of the labels.
    """
    grouped: dict[tuple[str, str, str], tuple[set[str], dict[str, str]]] = {}
    for site, offer in offers:
        names, access = grouped.setdefault((site, offer.kind, offer.provider), (set(), {}))
        names.add(offer.name)
        access.update(offer.access)
    routes = []
    for (site, kind, provider), (names, access) in sorted(grouped.items()):
        candidate_kind = CandidateKind.MCP_TOOL if kind == "tools" else CandidateKind.A2A_AGENT
        routes.append(
            AgentRoute(
                candidate_kind, provider, tuple(sorted(names)), site, tuple(sorted(access.items()))
            )
        )
    return routes


def agent_draft(route: AgentRoute, view: DraftView) -> CandidateDraft:
    """``route``'s candidates as ``view`` sees them, and any exclusion."""
    notes = ["tools and agents publish no signals: each scores neutral 0.5"]
    owner = f"{route.resource_kind}/{route.provider}"
    credential = (
        credential_ref(route.auth, owner, view.secrets, notes) if route.auth is not None else None
    )
    degraded = route.phase is ProviderPhase.DEGRADED
    if degraded:
        notes.append("status.phase is Degraded: not fresh")
    candidates = provider_candidates(
        route.names,
        site=route.site,
        cluster=route.provider,
        provider=route.provider,
        backend_kind=BackendKind.LOCAL,
        signals=_NO_SIGNALS,
        geography=view.geographies.get(route.site),
        healthy=True,
        fresh=not degraded,
        observed_at=None,
        credential=credential,
        kind=route.kind.value,
    )
    exclusion, detail = None, ""
    problem = access_problem(dict(route.access), view.sites.get(view.local_site), view.local_site)
    if problem is not None:
        exclusion, detail = ExclusionReason.ACCESS_DENIED, problem
    elif route.phase is ProviderPhase.UNAVAILABLE:
        exclusion, detail = ExclusionReason.PROVIDER_UNAVAILABLE, "status.phase is Unavailable"
    return CandidateDraft(route, candidates, exclusion, detail, tuple(notes))


def routes_of(
    providers: Sequence[AgentProvider],
    offers: Sequence[AgentRoute],
    sites: Mapping[str, GridSite],
    network: str,
    default_site: str,
) -> list[AgentRoute]:
    """Every route of ``network``: its resources' (by name), then the offers'."""
    own = sorted((p for p in providers if p.spec.grid_network_ref == network), key=lambda p: p.name)
    routes = [r for p in own for r in resource_routes(p, sites.values(), default_site)]
    return [*routes, *offers]
