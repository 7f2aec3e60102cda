"""The demo's mesh plan: sites, ports, providers and the resources each store holds.

`plan_mesh` decides everything ``grid demo`` will start, before anything runs:
free loopback ports, file locations under the demo directory, and the Grid
resources for each site's embedded store. Every site's store holds the same
GridNetwork and GridSites (each cluster has its own copy, as in Kubernetes,
with the real fingerprints of the dev certificates) plus only its own
InferenceProviders, the way each cluster holds only what runs there.

Each site's gateway reference enables ``consumerConfig`` on loopback ports of
its own, with a cluster endpoint for every provider of the mesh (the two
third-party providers are played by stand-in mock providers), so every site's
operator renders a complete ``praxis.yaml`` that ``grid gateway`` runs. The
first site also runs the demo's MCP server and the second its A2A agent
``planner`` (§16), each declared by an agent resource in its own site's store
and reached through every gateway at ``/mcp`` and ``/a2a/planner``. The
gateways run ``clientAuth.mode: apiKey`` (§15): `demo_keys` makes one key per
demo tenant, whose hash lines (`keys_file`) are the client keys Secret.
"""

from __future__ import annotations

import base64
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grid.core.identity import key_line
from grid.core.resources import API_VERSION, AUTO_DISCOVER_LABEL, SITE_LABEL
from grid.core.resources.discovery import AUTO_DISCOVER_SITES
from grid.demo.ports import PortPicker
from grid.gateway.config import ConfigError, load_config
from grid.gateway.settings import GatewaySettings

NETWORK = "grid-demo"
NAMESPACE = "grid-system"
MODEL = "llama-3.1-8b-instruct"
API_MODEL = "gpt-4o-mini"
"""The model of the third-party API provider (played by a stand-in mock)."""
CONSUMER_CONFIG_MAP = "praxis-consumer-config"
AGENT_NAME = "planner"
"""The demo A2A agent's name, `grid.demo.a2a_agent.AGENT_NAME` (repeated here so that
planning a mesh does not import a2a-sdk); its AgentToAgentProvider and cluster too."""
CLIENT_KEYS_SECRET = ("grid-demo-client-keys", "keys.yaml")
"""The Secret (name, key) holding the demo's client key hashes (``clientAuth: apiKey``)."""
DEMO_BUDGETS = {"acme": 0.05, "globex": 50.0}
"""The demo's budgetPolicy (USD): acme's small cap runs out within a minute of
``--traffic 2`` (about 50 s); globex's never does. Each tenant has a client key."""
SITE_GEOGRAPHY: dict[str, tuple[str, str]] = {
    "east": ("us-east-1", "us-east-1a"),
    "west": ("us-west-2", "us-west-2a"),
    "central": ("us-east-1", "us-east-1b"),
}
"""Region and zone of the well-known demo sites; further sites get generated ones."""


@dataclass(frozen=True)
class ProviderPlan:
    """One mock provider process and the InferenceProvider describing it."""

    name: str
    site: str
    port: int
    profile: str
    capacity: int = 4
    service_time_ms: float = 50.0
    """Mean service time of one completion (the mock's ``--service-time-ms``)."""
    capacity_weight: int | None = None
    """``spec.capacityWeight`` of its InferenceProvider (absent when None)."""


@dataclass
class SitePlan:
    """Everything one site's operator needs."""

    name: str
    region: str
    zone: str
    swim_port: int
    metrics_port: int
    egress_port: int
    root: Path
    gateway_port: int = 0
    """The site gateway's public listener."""
    gateway_admin_port: int = 0
    """The site gateway's admin listener (/ready, /metrics, /snapshot)."""
    providers: list[ProviderPlan] = field(default_factory=list)
    signals_port: int = 0
    """The mTLS signals listener's port (bound only under poll)."""
    tools_port: int = 0
    """The site's demo MCP server (`grid.demo.agent_servers`), 0 when it runs none."""
    agent_port: int = 0
    """The site's demo A2A agent (`grid.demo.a2a_agent`), 0 when it runs none."""

    @property
    def tool_cluster(self) -> str:
        """The AgentToolProvider (and cluster) of the site's MCP server."""
        return f"tools-{self.name}"

    @property
    def agent_cluster(self) -> str:
        """The AgentToAgentProvider (and cluster) of the site's A2A agent: the agent's name."""
        return AGENT_NAME

    @property
    def store(self) -> Path:
        """The site's embedded store."""
        return self.root / "store.db"

    @property
    def overlay_dir(self) -> Path:
        """Where the site's grid-config.json and grid-overlay.json land."""
        return self.root

    @property
    def gateway(self) -> str:
        """The gateway this site's overlay is for."""
        return f"edge-{self.name}"

    @property
    def praxis(self) -> Path:
        """The site gateway's rendered praxis.yaml."""
        return self.overlay_dir / "praxis.yaml"


@dataclass
class MeshPlan:
    """The whole demo mesh."""

    root: Path
    sites: dict[str, SitePlan]
    pki_dir: Path
    stand_ins: list[ProviderPlan] = field(default_factory=list)
    """Mock providers playing the third-party providers (cluster = provider name)."""

    @property
    def providers(self) -> list[ProviderPlan]:
        """Every mock provider of every site (the stand-ins not included)."""
        return [p for s in self.sites.values() for p in s.providers]

    @property
    def tool_sites(self) -> list[SitePlan]:
        """The sites running a demo MCP server."""
        return [s for s in self.sites.values() if s.tools_port]

    @property
    def agent_sites(self) -> list[SitePlan]:
        """The sites running the demo A2A agent."""
        return [s for s in self.sites.values() if s.agent_port]

    def cluster_count(self) -> int:
        """How many clusters a complete praxis.yaml lists."""
        servers = len(self.tool_sites) + len(self.agent_sites)
        return len(self.providers) + len(self.stand_ins) + servers

    def agent_servers(self) -> list[tuple[str, list[str]]]:
        """(child name, argv) of each demo MCP server and A2A agent (§16)."""
        tools = [(s.tool_cluster, "agent_servers", s.name, s.tools_port) for s in self.tool_sites]
        agents = [
            (f"agent-{s.agent_cluster}", "a2a_agent", s.name, s.agent_port)
            for s in self.agent_sites
        ]
        return [
            (
                name,
                [sys.executable, "-m", f"grid.demo.{module}", "--site", site, "--port", str(port)],
            )
            for name, module, site, port in tools + agents
        ]

    def agent_description(self, gateway: str | None) -> dict[str, Any]:
        """demo.json's ``tools`` and ``agents`` (each server's ``host:port`` by cluster), and
        the ``mcp`` and ``a2a`` URLs of ``gateway`` (None without one)."""
        tools = {s.tool_cluster: f"127.0.0.1:{s.tools_port}" for s in self.tool_sites}
        agents = {s.agent_cluster: f"127.0.0.1:{s.agent_port}" for s in self.agent_sites}
        return {
            "tools": tools,
            "mcp": gateway and f"http://{gateway}/mcp",
            "agents": agents,
            "a2a": gateway and f"http://{gateway}/a2a/{AGENT_NAME}",
        }


_PROFILES = ("steady", "bursty")


def plan_mesh(root: Path, site_names: list[str]) -> MeshPlan:
    """Choose ports and paths for ``site_names``: two mock providers at the first site,
    which also runs the MCP server, and the A2A agent at the second (none with one site)."""
    sites: dict[str, SitePlan] = {}
    pick_port = PortPicker()
    for i, name in enumerate(site_names):
        region, zone = SITE_GEOGRAPHY.get(name, (f"region-{i}", f"region-{i}a"))
        site = SitePlan(name, region, zone, pick_port(), pick_port(), pick_port(), root / name)
        site.gateway_port, site.gateway_admin_port = pick_port(), pick_port()
        site.signals_port = pick_port()
        count = 2 if i == 0 else 1
        for j in range(count):
            suffix = "" if count == 1 else f"-{'ab'[j]}"
            profile = _PROFILES[(i + j) % 2]
            site.providers.append(ProviderPlan(f"vllm-{name}{suffix}", name, pick_port(), profile))
        sites[name] = site
    first = site_names[0] if site_names else ""
    if first:
        sites[first].tools_port = pick_port()
    if len(site_names) > 1:
        sites[site_names[1]].agent_port = pick_port()
    stand_ins = [
        ProviderPlan("bedrock-llama", first, pick_port(), "steady", capacity=8),
        ProviderPlan("openai", first, pick_port(), "steady", capacity=8),
    ]
    return MeshPlan(root, sites, root / "pki", stand_ins)


def praxis_cluster_count(praxis: Path) -> int:
    """How many clusters a rendered praxis.yaml lists (0 before it exists)."""
    try:
        config = load_config(praxis, GatewaySettings().config_max_bytes)
    except ConfigError:
        return 0
    return len(config.clusters)


def demo_keys(tenants: list[str]) -> dict[str, str]:
    """A new client key for each tenant (demo.json's ``api_keys``), as `grid keys create` makes."""
    return {tenant: f"grid-{secrets.token_urlsafe(32)}" for tenant in tenants}


def keys_file(keys: dict[str, str]) -> bytes:
    """The keys file of ``keys``: one ``{tenant, sha256}`` line each, never a key itself."""
    return "".join(key_line(tenant, key) for tenant, key in keys.items()).encode()


def consumer_config(plan: MeshPlan, site: SitePlan, credential_base: Path) -> dict[str, Any]:
    """The site gateway's ``consumerConfig``: loopback listeners, every cluster plaintext,
    and clients authenticated by API key."""
    endpoints = [
        {
            "cluster": p.name,
            "address": f"127.0.0.1:{p.port}",
            "transport": {"mode": "plaintext"},
        }
        for p in [*plan.providers, *plan.stand_ins]
    ]
    servers = [(s.tool_cluster, s.tools_port) for s in plan.tool_sites]
    servers += [(s.agent_cluster, s.agent_port) for s in plan.agent_sites]
    endpoints += [
        {"cluster": cluster, "address": f"127.0.0.1:{port}", "transport": {"mode": "plaintext"}}
        for cluster, port in servers
    ]
    return {
        "enabled": True,
        "configMapName": CONSUMER_CONFIG_MAP,
        "listenerHost": "127.0.0.1",
        "listenerPort": site.gateway_port,
        "adminAddress": f"127.0.0.1:{site.gateway_admin_port}",
        "credentialMountBase": str(credential_base),
        "clusterEndpoints": endpoints,
        "clientAuth": {
            "mode": "apiKey",
            "secretRef": {
                "name": CLIENT_KEYS_SECRET[0],
                "namespace": NAMESPACE,
                "key": CLIENT_KEYS_SECRET[1],
            },
        },
    }


def _meta(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "labels": labels or {}}


def network_doc(
    plan: MeshPlan,
    *,
    probe_interval: str,
    suspicion_timeout: str,
    credential_base: Path,
    signal_transport: str = "gossip",
) -> dict[str, Any]:
    """The GridNetwork every site's store holds (``signalTransport`` only under poll)."""
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "GridNetwork",
        # A site started by hand against the demo appears as an auto-discovered GridSite.
        "metadata": _meta(NETWORK, {AUTO_DISCOVER_SITES: "true"}),
        "spec": {
            "seeds": [f"127.0.0.1:{s.swim_port}" for s in plan.sites.values()],
            "gatewayRefs": [
                {
                    "name": s.gateway,
                    "namespace": NAMESPACE,
                    "localSiteName": s.name,
                    "consumerConfig": consumer_config(plan, s, credential_base),
                }
                for s in plan.sites.values()
            ],
            "swim": {
                "gossipNodes": 3,
                "probeInterval": probe_interval,
                "suspicionTimeout": suspicion_timeout,
            },
            "tls": {
                "caSecretRef": {"name": "grid-ca", "namespace": NAMESPACE, "key": "ca.crt"},
                "swimKeyRef": {"name": "grid-swim-key", "namespace": NAMESPACE, "key": "swim.key"},
                "trust": {"mode": "pin"},
            },
            "staleCandidateTtlSeconds": 10,
            "budgetPolicy": {
                "tenants": [{"tenantId": t, "capUsd": cap} for t, cap in DEMO_BUDGETS.items()]
            },
        },
    }
    if signal_transport != "gossip":
        doc["spec"]["signalTransport"] = {"mode": signal_transport}
    return doc


def site_doc(site: SitePlan, fingerprint: str) -> dict[str, Any]:
    """A GridSite with the real fingerprint of its dev certificate."""
    return {
        "apiVersion": API_VERSION,
        "kind": "GridSite",
        "metadata": _meta(site.name, {AUTO_DISCOVER_LABEL: "true", "tier": "prod"}),
        "spec": {
            "gridNetworkRef": NETWORK,
            "region": site.region,
            "zone": site.zone,
            "egress": {
                "address": f"127.0.0.1:{site.egress_port}",
                "tls": {"mode": "Mutual", "serverName": "localhost"},
            },
            "trust": {"certFingerprint": fingerprint},
        },
    }


def provider_doc(provider: ProviderPlan, *, interval: str) -> dict[str, Any]:
    """An InferenceProvider for one mock provider, scraped every ``interval``."""
    endpoint = f"http://127.0.0.1:{provider.port}"
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "InferenceProvider",
        "metadata": _meta(provider.name, {SITE_LABEL: provider.site}),
        "spec": {
            "gridNetworkRef": NETWORK,
            "backendKind": "local",
            "providerKind": "self_hosted",
            "models": [{"name": MODEL, "capabilities": ["chat"], "contextWindow": 131072}],
            "endpoint": endpoint,
            "cost": {"perMillionInputTokens": 0.2, "perMillionOutputTokens": 0.6},
            "healthCheck": {"path": "/health", "interval": interval, "timeout": interval},
            "metricsConfig": {
                "path": "/metrics",
                "interval": interval,
                "timeout": interval,
                "queueCapacity": provider.capacity * 4,
            },
        },
    }
    if provider.capacity_weight is not None:
        doc["spec"]["capacityWeight"] = provider.capacity_weight
    return doc


def tool_provider_doc(site: SitePlan, *, interval: str) -> dict[str, Any]:
    """The AgentToolProvider of the site's demo MCP server: no tools declared, so the
    operator lists them with MCP ``tools/list`` every ``interval``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "AgentToolProvider",
        "metadata": _meta(site.tool_cluster, {SITE_LABEL: site.name}),
        "spec": {
            "gridNetworkRef": NETWORK,
            "endpoint": f"http://127.0.0.1:{site.tools_port}/mcp",
            "protocol": "mcp",
            "healthCheck": {"interval": interval, "timeout": interval},
        },
    }


def agent_provider_doc(site: SitePlan, *, interval: str) -> dict[str, Any]:
    """The AgentToAgentProvider of the site's demo agent: no card declared, so the operator
    reads it from the agent's well-known path every ``interval``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "AgentToAgentProvider",
        "metadata": _meta(site.agent_cluster, {SITE_LABEL: site.name}),
        "spec": {
            "gridNetworkRef": NETWORK,
            "endpoint": f"http://127.0.0.1:{site.agent_port}",
            "protocol": "a2a",
            "healthCheck": {"interval": interval, "timeout": interval},
        },
    }


def agent_docs(site: SitePlan, *, interval: str) -> list[dict[str, Any]]:
    """The agent resources of the servers the site runs (§16)."""
    docs = [tool_provider_doc(site, interval=interval)] if site.tools_port else []
    return docs + ([agent_provider_doc(site, interval=interval)] if site.agent_port else [])


def third_party_docs(site: str) -> list[dict[str, Any]]:
    """A cloud-managed and an API provider at ``site``, played by stand-in mock providers."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "InferenceProvider",
            "metadata": _meta("bedrock-llama", {SITE_LABEL: site}),
            "spec": {
                "gridNetworkRef": NETWORK,
                "backendKind": "cloud_managed",
                "providerKind": "bedrock",
                "models": [{"name": MODEL}],
                "cost": {"perMillionInputTokens": 0.3, "perMillionOutputTokens": 0.6},
            },
        },
        {
            "apiVersion": API_VERSION,
            "kind": "InferenceProvider",
            "metadata": _meta("openai", {SITE_LABEL: site}),
            "spec": {
                "gridNetworkRef": NETWORK,
                "backendKind": "api_provider",
                "providerKind": "open_ai",
                "models": [{"name": API_MODEL}],
                "cost": {"perMillionInputTokens": 0.15, "perMillionOutputTokens": 0.6},
                "auth": {
                    "strategy": "BearerToken",
                    "secretRef": {
                        "name": "openai-credentials",
                        "namespace": NAMESPACE,
                        "key": "token",
                    },
                },
            },
        },
    ]


def secret_doc(name: str, items: dict[str, bytes]) -> dict[str, Any]:
    """A core v1 Secret in the demo namespace with base64 data."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in items.items()},
    }
