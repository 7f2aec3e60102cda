"""The praxis.yaml the operator renders, run byte for byte by `grid gateway`, routes a request.

The operator's own writers (`OverlayWriter`, `ConsumerConfigWriter`) render a
network whose provider needs a bearer token from a Secret. The ConfigMap and
the file must agree byte for byte and hold no token; the gateway started from
that file must route a chat completion to the provider with the token it read
from the mounted file.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grid.core.resources import API_VERSION, SITE_LABEL, GridNetwork, GridSite, InferenceProvider
from grid.core.resources.secret import Secret
from grid.core.routing.render import RenderInputs, render
from grid.demo.ports import free_port
from grid.operator.output import ConsumerConfigWriter, OverlayWriter
from grid.testing.gateway import GatewayProcess, Upstream
from grid.testing.store import InMemoryStore

pytestmark = pytest.mark.e2e

TOKEN = "GRIDCANARY-praxis-3f9a"


def _inputs(upstream: Upstream, tmp: Path, public: int, admin: int) -> RenderInputs:
    network = GridNetwork.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "GridNetwork",
            "metadata": {"name": "prod", "generation": 3},
            "spec": {
                "gatewayRefs": [
                    {
                        "name": "edge",
                        "namespace": "gw",
                        "localSiteName": "east",
                        "consumerConfig": {
                            "enabled": True,
                            "listenerHost": "127.0.0.1",
                            "listenerPort": public,
                            "adminAddress": f"127.0.0.1:{admin}",
                            "credentialMountBase": str(tmp / "mounted"),
                            "clusterEndpoints": [
                                {
                                    "cluster": "vllm",
                                    "address": upstream.address,
                                    "transport": {"mode": "plaintext"},
                                }
                            ],
                        },
                    }
                ]
            },
        }
    )
    site = GridSite.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "GridSite",
            "metadata": {"name": "east"},
            "spec": {"gridNetworkRef": "prod", "region": "r1", "zone": "z1"},
        }
    )
    provider = InferenceProvider.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "InferenceProvider",
            "metadata": {"name": "vllm", "labels": {SITE_LABEL: "east"}},
            "spec": {
                "gridNetworkRef": "prod",
                "backendKind": "local",
                "providerKind": "self_hosted",
                "models": [{"name": "a: b"}],
                "endpoint": f"http://{upstream.address}",
                "auth": {
                    "strategy": "BearerToken",
                    "secretRef": {"name": "vllm-token", "namespace": "gw", "key": "token"},
                },
            },
        }
    )
    secret = Secret.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "vllm-token", "namespace": "gw"},
            "data": {"token": base64.b64encode(TOKEN.encode()).decode()},
        }
    )
    return RenderInputs(
        networks=(network,), sites=(site,), providers=(provider,), secrets=(secret,)
    )


async def test_the_operator_rendered_file_routes_end_to_end(
    tmp_path: Path,
    upstreams: Callable[..., Awaitable[Upstream]],
    gateways: Callable[..., Awaitable[GatewayProcess]],
    http: aiohttp.ClientSession,
) -> None:
    upstream = await upstreams("vllm")
    public, admin = free_port(), free_port()
    inputs = _inputs(upstream, tmp_path, public, admin)
    rendered = render(inputs, site="east", gateway="edge", now=datetime.now(UTC))
    store = InMemoryStore()
    out = tmp_path / "overlay"
    overlays = OverlayWriter(store, out)
    consumers = ConsumerConfigWriter(store, overlays)
    await overlays.write(rendered)
    ref = rendered.network.spec.gateway_refs[0]
    status = await consumers.write(rendered, ref.consumer_config)
    assert status["phase"] == "Rendered"
    configmap: dict[str, Any] = await store.get(
        "ConfigMap", "praxis-consumer-config", namespace="gw"
    )
    text = (out / "praxis.yaml").read_bytes()
    assert configmap["data"]["praxis.yaml"].encode() == text
    for form in (TOKEN, base64.b64encode(TOKEN.encode()).decode()):
        assert form.encode() not in text
    mounted = tmp_path / "mounted" / "vllm-token" / "token"
    mounted.parent.mkdir(parents=True)
    mounted.write_text(TOKEN)

    gateway = await gateways(out / "praxis.yaml", f"127.0.0.1:{public}", f"127.0.0.1:{admin}")
    body = {"model": "a: b", "messages": [{"role": "user", "content": "hello"}]}
    async with http.post(gateway.url(), json=body) as resp:
        assert resp.status == 200
        assert (await resp.json()) == {"served_by": "vllm", "model": "a: b"}
    assert upstream.seen[0]["Authorization"] == f"Bearer {TOKEN}"
    assert upstream.seen[0]["x-ai-routing-revision"] == rendered.envelope["revision"]["value"]
    snapshot = await gateway.snapshot(http)
    assert TOKEN not in str(snapshot)
    assert TOKEN not in await gateway.metrics(http)
    assert TOKEN not in gateway.log.read_text()
