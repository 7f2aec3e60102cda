"""The poll transport: two sites on loopback serve and pull each other's signals."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from grid.core.resources import GridNetwork, GridSite
from grid.core.routing.scoring import SignalValues
from grid.core.routing.signals import ProviderSignals, SignalsScope
from grid.core.swim.members import Member, MemberState
from grid.core.trust import PeerClass
from grid.core.vocabulary import BackendKind
from grid.operator.signals import PollTransport, leaf_der, poll_targets, trust_of

from .conftest import Pki

T0 = datetime(2026, 1, 1, tzinfo=UTC)
API = "grid.praxis-proxy.io/v1alpha1"


def network() -> GridNetwork:
    return GridNetwork.model_validate(
        {
            "apiVersion": API,
            "kind": "GridNetwork",
            "metadata": {"name": "net"},
            "spec": {"signalTransport": {"mode": "poll"}},
        }
    )


def site(name: str, fingerprint: str) -> GridSite:
    return GridSite.model_validate(
        {
            "apiVersion": API,
            "kind": "GridSite",
            "metadata": {"name": name},
            "spec": {"gridNetworkRef": "net", "trust": {"certFingerprint": fingerprint}},
        }
    )


def entry(site_name: str, at: datetime = T0, **signals: float) -> ProviderSignals:
    return ProviderSignals(
        f"p-{site_name}",
        f"p-{site_name}",
        site_name,
        BackendKind.LOCAL,
        ("m",),
        True,
        at,
        SignalValues(**signals),
    )


def test_poll_targets_are_alive_members_at_their_swim_host_and_signals_port() -> None:
    members = [
        Member("west", "127.0.0.2:7946", 1, MemberState.ALIVE),
        Member("north", "10.0.0.9:7946", 1, MemberState.ALIVE),
        Member("gone", "10.0.0.8:7946", 1, MemberState.DEAD),
        Member("doubt", "10.0.0.7:7946", 1, MemberState.SUSPECT),
        Member("east", "127.0.0.1:7946", 1, MemberState.ALIVE),
    ]
    targets = poll_targets(members, "east", {"west": 17947})
    assert targets == {"west": "127.0.0.2:17947", "north": "10.0.0.9:7947"}


def test_trust_comes_from_the_network_and_its_sites(pki: Pki) -> None:
    sites = [site(n, pki.sites[n].fingerprint) for n in ("east", "west")]
    trust = trust_of(network(), sites, "east", leaf_der(pki.sites["east"].cert))
    assert trust.classify(leaf_der(pki.sites["west"].cert)) is PeerClass.PEER
    assert trust.classify(leaf_der(pki.sites["east"].cert)) is PeerClass.LOCAL
    assert trust.classify(leaf_der(pki.sites["central"].cert)) is PeerClass.UNKNOWN


def transport(pki: Pki, name: str) -> PollTransport:
    sites = [site(n, pki.sites[n].fingerprint) for n in ("east", "west")]
    files = pki.sites[name]
    return PollTransport(
        "net",
        name,
        epoch=5,
        now=T0,
        trust=trust_of(network(), sites, name, leaf_der(files.cert)),
        tls_files=(pki.ca, files.cert, files.key),
        registry=CollectorRegistry(),
        poll_interval_s=0.1,
    )


async def test_sites_pull_each_other_and_serve_the_grid_view(pki: Pki) -> None:
    east, west = transport(pki, "east"), transport(pki, "west")
    await east.start("127.0.0.1:0")
    west_address = await west.start("127.0.0.1:0")
    try:
        west.refresh([entry("west", kv_cache_utilization=0.4)], T0, None)
        assert await east.poll_round({"west": west_address})
        view = east.refresh([entry("east", queue_depth=0.1)], T0 + timedelta(seconds=2), 60)
        assert [(e.site, e.name) for e in view.providers] == [
            ("east", "p-east"),
            ("west", "p-west"),
        ]
        assert view.generated_at == T0 + timedelta(seconds=2)
        grid = json.loads(east.published(SignalsScope.GRID).body)
        assert [p["signals"] for p in grid["providers"]] == [
            {"queue_depth": 0.1},
            {"kv_cache_utilization": 0.4},
        ]
        own = json.loads(east.published(SignalsScope.SITE).body)
        assert [p["site"] for p in own["providers"]] == ["east"]
        # Nothing changed at west: the next poll is a 304 and brings nothing new.
        assert not await east.poll_round({"west": west_address})
        # West goes silent: its entry stays until it ages past the TTL.
        await west.stop()
        assert not await east.poll_round({"west": west_address})
        kept = east.refresh([], T0 + timedelta(seconds=50), 60)
        assert [e.site for e in kept.providers] == ["west"]
        evicted = east.refresh([], T0 + timedelta(seconds=61), 60)
        assert evicted.providers == ()
    finally:
        await east.stop()
        await west.stop()
