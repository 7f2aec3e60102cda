"""Which InferenceProviders this site serves, and their ``status.matchingSites``.

A provider is served here when it carries this site's label or its ``siteSelector``
selects this site's GridSite (SPEC-DECISIONS §2a); each is pinned to this site
before the InferenceProvider controller (`grid.operator.providers`) probes it.
Every provider with a ``siteSelector`` gets ``status.matchingSites`` written when
the sites it selects change.
"""

from __future__ import annotations

from collections.abc import Callable

from grid.adapters.store.port import ResourceStore
from grid.core.resources import (
    AgentProvider,
    AgentToAgentProvider,
    AgentToolProvider,
    InferenceProvider,
    hosting_sites,
    hosts_here,
    pinned_to,
)
from grid.operator.agents import AgentController
from grid.operator.network import ServedNetwork
from grid.operator.providers import ProviderController
from grid.operator.watched_store import read_models

AGENT_KINDS = ("AgentToolProvider", "AgentToAgentProvider")
HOSTED_KINDS = ("InferenceProvider", *AGENT_KINDS)
"""Kinds whose resources a site hosts: a change to one re-syncs what is probed here."""
WATCHED_KINDS = ("GridNetwork", "GridSite", *HOSTED_KINDS, "Secret")
"""Every kind the operator watches."""


class OwnProviders:
    """The served network's providers hosted here, kept in step with the controller."""

    def __init__(
        self,
        store: ResourceStore,
        site: str,
        served: ServedNetwork,
        controller: ProviderController,
        changed: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.site = site
        self.served = served
        self.controller = controller
        self.agents = AgentController(store, changed)
        """The agent resources' discovery loops (`grid.operator.agents`)."""

    async def stop(self) -> None:
        """Stop the providers' and the agents' loops."""
        await self.controller.stop()
        await self.agents.stop()

    async def hosted_agents(self) -> list[AgentProvider]:
        """The agent resources this site serves, each pinned to this site."""
        own_site = next((s for s in await self.served.sites() if s.name == self.site), None)
        tools = await read_models(self.store, AGENT_KINDS[0], AgentToolProvider)
        agents = await read_models(self.store, AGENT_KINDS[1], AgentToAgentProvider)
        network = self.served.name

        def here(agent: AgentProvider) -> bool:
            return agent.spec.grid_network_ref == network and hosts_here(agent, own_site, self.site)

        return [
            *(pinned_to(t, self.site) for t in tools if here(t)),
            *(pinned_to(a, self.site) for a in agents if here(a)),
        ]

    async def routable(self) -> tuple[list[InferenceProvider], list[AgentProvider]]:
        """What this site renders of its own: the providers its controller probes,
        at their latest status, and the agent resources it discovers, each only while
        its credential resolves."""
        controller = self.controller
        own = [p for p in await self.hosted() if p.name in controller.names]
        providers = [
            controller.current(p.name) or p for p in own if controller.credentials_ok(p.name)
        ]
        agents = [s.provider for s in self.agents.states() if s.credential_ok]
        return providers, agents

    async def hosted(self) -> list[InferenceProvider]:
        """The providers this site serves, each pinned to this site."""
        providers = await read_models(self.store, "InferenceProvider", InferenceProvider)
        own_site = next((s for s in await self.served.sites() if s.name == self.site), None)
        return [
            pinned_to(p, self.site)
            for p in providers
            if p.spec.grid_network_ref == self.served.name and hosts_here(p, own_site, self.site)
        ]

    async def sync(self) -> None:
        """Hand the controller the providers to probe, then write changed matchingSites."""
        network = self.served.network
        self.controller.metrics_default_s = network.spec.metrics_refresh_s if network else None
        self.controller.sync(await self.hosted())
        self.agents.sync(await self.hosted_agents())
        await self._write_matching_sites()

    async def _write_matching_sites(self) -> None:
        """Write ``status.matchingSites`` of every siteSelector provider that changed."""
        sites = await self.served.sites()
        models: tuple[type[InferenceProvider | AgentToolProvider | AgentToAgentProvider], ...] = (
            InferenceProvider,
            AgentToolProvider,
            AgentToAgentProvider,
        )
        for kind, model in zip(HOSTED_KINDS, models, strict=True):
            for obj in await self.store.list(kind):
                provider = model.model_validate(obj)
                if provider.spec.grid_network_ref != self.served.name:
                    continue
                matching = hosting_sites(provider, sites)
                current = provider.status.matching_sites if provider.status else []
                if matching != current:
                    await self.store.patch_status(kind, provider.name, {"matchingSites": matching})
