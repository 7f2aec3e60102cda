"""The routing bench's Grid side: a demo mesh of real processes with the bench's providers.

`BenchMesh` is `grid.demo.mesh.DemoMesh` (dev PKI, one embedded store and one
``grid operator`` per site, a ``grid gateway`` per site run from the
praxis.yaml its operator renders) with the demo's providers replaced by the
bench's mock providers, all at the first site; every site's gateway has an
endpoint for each of them, so N sites share the same providers. The bench
switches ``GridNetwork.spec.selectionPolicy.mode`` as an administrator would,
in every site's store, and waits until every gateway has loaded an overlay
rendered with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from grid.adapters.store.sqlite import SqliteStore
from grid.demo import plan as p
from grid.demo.mesh import DemoMesh
from grid.demo.ports import free_port
from grid.errors import NotFound

from .routing_model import ProviderSpec

SITES = ("east", "west", "central")
SCRAPE_INTERVAL = "500ms"
MODE_SWITCH_TIMEOUT_S = 60.0
_POLICY = {
    "deterministic": ("deterministic", False),
    "roundRobin": ("round_robin", False),
    "random": ("random", False),
    "weightedRandom": ("weighted_random", False),
    "leastLoaded": ("random", True),
}
"""Each mode's overlay ``selection_policy`` and ``selection_load_aware`` (§14)."""
_DEMO_ONLY = ("bedrock-llama", "openai")
"""The demo's third-party providers, which the bench's stores do not hold."""


def _port(taken: set[int]) -> int:
    while True:
        port = free_port()
        if port not in taken:
            taken.add(port)
            return port


class BenchMesh(DemoMesh):
    """N sites sharing the bench's mock providers (all at the first site)."""

    def __init__(
        self, root: Path, providers: Sequence[ProviderSpec], gateways: int, transport: str
    ) -> None:
        super().__init__(
            root,
            list(SITES[:gateways]) if gateways <= len(SITES) else _names(gateways),
            scrape_interval=SCRAPE_INTERVAL,
            signal_transport=transport,
            signals_poll_interval_s=0.5,
        )
        taken = {
            port
            for s in self.plan.sites.values()
            for port in (s.swim_port, s.metrics_port, s.egress_port, s.gateway_port,
                         s.gateway_admin_port, s.signals_port)
        }  # fmt: skip
        sites = list(self.plan.sites.values())
        for site in sites:
            site.providers = []
        sites[0].providers = [
            p.ProviderPlan(
                f"mock-{i}",
                sites[0].name,
                _port(taken),
                "steady",
                capacity=spec.capacity,
                service_time_ms=spec.service_s * 1000,
                capacity_weight=spec.weight,
            )
            for i, spec in enumerate(providers)
        ]
        self.plan.stand_ins = []
        self.mode = "leastLoaded"

    @property
    def client_key(self) -> str:
        """The client key of the demo tenant with the largest budget (``clientAuth: apiKey``)."""
        return self.api_keys[max(p.DEMO_BUDGETS, key=lambda t: p.DEMO_BUDGETS[t])]

    @property
    def provider_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{pp.port}" for pp in self.plan.providers]

    @property
    def gateway_urls(self) -> list[str]:
        return [
            f"http://127.0.0.1:{s.gateway_port}/v1/chat/completions"
            for s in self.plan.sites.values()
        ]

    async def prepare(self) -> None:
        """The demo's stores without its third-party providers, in the current mode."""
        await super().prepare()
        for site in self.plan.sites.values():
            store = await SqliteStore.open(site.store)
            try:
                for name in _DEMO_ONLY:
                    with contextlib.suppress(NotFound):
                        await store.delete("InferenceProvider", name)
            finally:
                await store.close()
        await self._declare(self.mode)

    async def _declare(self, mode: str) -> None:
        await self.edit_network_spec("selectionPolicy", {"mode": mode})

    async def set_mode(self, mode: str) -> None:
        """Declare ``mode`` and wait until every gateway routes by an overlay rendered in it."""
        self.mode = mode
        await self._declare(mode)
        deadline = time.monotonic() + MODE_SWITCH_TIMEOUT_S
        async with aiohttp.ClientSession() as http:
            for site in self.plan.sites.values():
                while not await self._serves(http, site, mode):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"gateway-{site.name} did not switch to {mode}")
                    await asyncio.sleep(0.2)

    async def _serves(self, http: aiohttp.ClientSession, site: p.SitePlan, mode: str) -> bool:
        """The site's overlay is in ``mode``, lists every provider, and its gateway loaded it."""
        try:
            envelope = json.loads((site.overlay_dir / "grid-overlay.json").read_text())
        except (OSError, ValueError):
            return False
        overlay = envelope["overlay"]
        policy = overlay.get("selection_policy"), bool(overlay.get("selection_load_aware"))
        routable = [
            c
            for c in overlay["candidates"]
            if c.get("name") == p.MODEL and c.get("admission_state") == "new_and_existing"
        ]
        if policy != _POLICY[mode] or len(routable) < len(self.plan.providers):
            return False
        url = f"http://127.0.0.1:{site.gateway_admin_port}/snapshot"
        try:
            async with http.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                snapshot = await r.json()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return False
        return bool(snapshot.get("revision") == envelope["revision"]["value"])

    async def degrade(
        self, http: aiohttp.ClientSession, index: int, factor: float, after_s: float
    ) -> None:
        """Provider ``index``'s service time times ``factor`` from ``after_s`` seconds on."""
        url = f"{self.provider_urls[index]}/control/degrade"
        async with http.post(url, json={"factor": factor, "after_s": max(0.0, after_s)}) as r:
            r.raise_for_status()

    async def received(self, http: aiohttp.ClientSession) -> list[int]:
        """Completion requests each provider has received so far (its /stats)."""
        counts = []
        for base in self.provider_urls:
            async with http.get(f"{base}/stats", timeout=aiohttp.ClientTimeout(total=2)) as r:
                counts.append(int((await r.json())["requests"]))
        return counts


def _names(count: int) -> list[str]:
    return [*SITES, *(f"site-{i}" for i in range(len(SITES), count))]
