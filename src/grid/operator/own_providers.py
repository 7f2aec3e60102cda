"""Which InferenceProviders this site serves, and their ``status.matchingSites``.

A provider is served here when it carries this site's label or its ``siteSelector``
selects this site's GridSite (SPEC-DECISIONS §2a); each is pinned to this site
before the InferenceProvider controller (`grid.operator.providers`) probes it.
Every provider with a ``siteSelector`` gets ``status.matchingSites`` written when
the sites it selects change.
"""

from __future__ import annotations

from grid.adapters.store.port import ResourceStore
from grid.core.resources import InferenceProvider, hosting_sites, hosts_here, pinned_to
from grid.operator.network import ServedNetwork
from grid.operator.providers import ProviderController


class OwnProviders:
    """The served network's providers hosted here, kept in step with the controller."""

    def __init__(
        self, store: ResourceStore, site: str, served: ServedNetwork, controller: ProviderController
    ) -> None:
        self.store = store
        self.site = site
        self.served = served
        self.controller = controller

    async def hosted(self) -> list[InferenceProvider]:
        """The providers this site serves, each pinned to this site."""
        providers = [
            InferenceProvider.model_validate(o) for o in await self.store.list("InferenceProvider")
        ]
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
        await self._write_matching_sites()

    async def _write_matching_sites(self) -> None:
        """Write ``status.matchingSites`` of every siteSelector provider that changed."""
        sites = await self.served.sites()
        for obj in await self.store.list("InferenceProvider"):
            provider = InferenceProvider.model_validate(obj)
            if provider.spec.grid_network_ref != self.served.name:
                continue
            matching = hosting_sites(provider, sites)
            current = provider.status.matching_sites if provider.status else []
            if matching != current:
                await self.store.patch_status(
                    "InferenceProvider", provider.name, {"matchingSites": matching}
                )
