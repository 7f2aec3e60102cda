"""GridNetwork ``spec.region``/``zone``: where the network's own site runs (upstream's fallback)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from grid.core.resources import GridNetwork, GridSite, InferenceProvider, parse_resource
from grid.core.routing.candidate import Geography
from grid.core.routing.render import RenderInputs, own_geography, render
from grid.core.routing.signals import parse_signals

NOW = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
API = "grid.praxis-proxy.io/v1alpha1"


def network(**spec: Any) -> GridNetwork:
    body = {"gatewayRefs": [{"name": "edge", "namespace": "ns", "localSiteName": "east"}]}
    obj = {"apiVersion": API, "kind": "GridNetwork", "metadata": {"name": "grid"}}
    return GridNetwork.model_validate(obj | {"spec": body | spec})


def site(name: str, **spec: str) -> GridSite:
    return GridSite.model_validate(
        {
            "apiVersion": API,
            "kind": "GridSite",
            "metadata": {"name": name, "labels": {"gpu": "yes"}},
            "spec": {"gridNetworkRef": "grid", **spec},
        }
    )


POOL = parse_resource(
    {
        "apiVersion": API,
        "kind": "InferenceProvider",
        "metadata": {"name": "pool"},
        "spec": {
            "gridNetworkRef": "grid",
            "backendKind": "local",
            "providerKind": "self_hosted",
            "siteSelector": {"matchLabels": {"gpu": "yes"}},
            "models": [{"name": "llama"}],
        },
    }
)


def tiers(net: GridNetwork, sites: list[GridSite]) -> dict[str, str]:
    observed = (NOW - timedelta(seconds=5)).isoformat()
    entries = [
        {
            "name": "pool",
            "cluster": "pool",
            "site": s,
            "backend_kind": "local",
            "models": ["llama"],
            "observed_at": observed,
            "signals": {"queue_depth": 0.1},
        }
        for s in ("east", "west")
    ]
    signals = parse_signals(
        {
            "schema_version": "1.0.0",
            "network": "grid",
            "site": "east",
            "epoch": 1,
            "sequence": 1,
            "generated_at": "2026-01-01T12:00:00Z",
            "providers": entries,
        }
    )
    assert isinstance(POOL, InferenceProvider)
    inputs = RenderInputs(networks=[net], sites=sites, providers=[POOL])
    rendered = render(inputs, site="east", gateway="edge", now=NOW, signals=signals)
    return {c["site"]: c["selection_tier"] for c in rendered.overlay["candidates"]}


WEST = site("west", region="us-west", zone="us-west-1a")


def test_a_site_without_geography_takes_the_network_region_and_zone() -> None:
    bare = [site("east"), WEST]
    assert tiers(network(), bare)["west"] == "cross_region"
    assert tiers(network(region="us-west"), bare)["west"] == "same_region"
    assert tiers(network(region="us-west", zone="us-west-1a"), bare)["west"] == "same_zone"


def test_the_site_own_geography_wins_over_the_network() -> None:
    placed = [site("east", region="us-east"), WEST]
    assert tiers(network(region="us-west", zone="us-west-1a"), placed)["west"] == "cross_region"


@pytest.mark.parametrize(
    ("spec", "net", "want"),
    [
        ({}, {"region": "r", "zone": "z"}, Geography("r", "z")),
        ({"region": "r"}, {"region": "r", "zone": "z"}, Geography("r", "z")),
        # The network's zone is in its own region: it never joins a site elsewhere.
        ({"region": "other"}, {"region": "r", "zone": "z"}, Geography("other", None)),
        ({"zone": "mine"}, {"region": "r", "zone": "z"}, Geography("r", "mine")),
        ({}, {}, Geography(None, None)),
    ],
)
def test_own_geography_field_by_field(
    spec: dict[str, str], net: dict[str, str], want: Geography
) -> None:
    assert own_geography(network(**net), site("east", **spec)) == want
    if not spec:
        assert own_geography(network(**net), None) == want


def test_other_sites_never_take_the_network_geography() -> None:
    # east is placed; west has none of its own and stays unknown (cross_region).
    sites = [site("east", region="us-west"), site("west")]
    assert tiers(network(region="us-west", zone="us-west-1a"), sites)["west"] == "cross_region"
