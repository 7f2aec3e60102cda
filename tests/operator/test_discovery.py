"""Auto-discovery and departure, through the store: discovery and site controllers.

West is a remote SWIM member whose lanes arrive through a real `GridState`
replica (the items a peer would gossip). The site controller's clock is a
stand-in advanced by hand, so "dead for the TTL" takes no real time.
"""

from __future__ import annotations

from typing import Any

from grid.core.crdt.offer import AgentOffer
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import (
    CertLaneValue,
    GatewayLaneValue,
    GridStateSnapshot,
    Lane,
    MetadataLaneValue,
)
from grid.core.resources import API_VERSION, GridNetwork, GridSite
from grid.core.resources.phases import SitePhase
from grid.core.resources.site_offers import site_offer
from grid.core.swim.members import MemberState
from grid.operator.discovery import SiteDiscovery
from grid.operator.sites import SiteController

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


class Clock:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def network(auto: bool = True, ttl: int | None = None) -> GridNetwork:
    labels = {"grid.praxis-proxy.io/auto-discover-sites": "true"} if auto else {}
    spec: dict[str, Any] = {} if ttl is None else {"staleCandidateTtlSeconds": ttl}
    return GridNetwork.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "GridNetwork",
            "metadata": {"name": "prod", "labels": labels},
            "spec": spec,
        }
    )


def gossip(replica: GridState, origin: str, egress: str, pem: str = PEM) -> None:
    """Deliver a peer's gateway, metadata and cert lanes into the replica."""
    peer = GridState(origin, base_revision=10)
    snap = (
        GridStateSnapshot.empty(origin, 10)
        .set_lane(Lane.GATEWAY, GatewayLaneValue(egress_address=egress))
        .set_lane(Lane.METADATA, MetadataLaneValue(region="eu", zone="eu-1"))
    )
    snap = snap.set_lane(Lane.CERT, CertLaneValue(pem=pem))
    for item in peer.update_local(snap):
        replica.apply(item)


async def sites(store: Any) -> list[GridSite]:
    return [GridSite.model_validate(o) for o in await store.list("GridSite")]


async def test_an_alive_remote_member_gets_a_discovered_site_that_waits_for_trust(
    store: Any,
) -> None:
    replica = GridState("east")
    gossip(replica, "West_1", "127.0.0.1:9")
    discovery = SiteDiscovery(store, "east")
    members = {"West_1": MemberState.ALIVE, "gone": MemberState.DEAD}
    assert await discovery.reconcile(network(), [], members, replica)
    (site,) = await sites(store)
    assert site.name == "prod-west-1"
    assert site.spec.egress is not None and site.spec.egress.address == "127.0.0.1:9"
    assert (site.spec.region, site.spec.zone) == ("eu", "eu-1")
    # A second round with nothing new writes nothing.
    writes = store.writes("GridSite")
    assert not await discovery.reconcile(network(), await sites(store), members, replica)
    assert store.writes("GridSite") == writes

    controller = SiteController(store, "east", None, clock=Clock())
    phases = []
    for _ in range(4):
        await controller.reconcile(await sites(store), members, certs={"West_1": PEM})
        phases.append(controller.phases["West_1"])
    # Without a pin the probe cannot pass: the site stays Connecting.
    assert phases == [
        SitePhase.DISCOVERED,
        SitePhase.CONNECTING,
        SitePhase.CONNECTING,
        SitePhase.CONNECTING,
    ]
    (site,) = await sites(store)
    assert site.status is not None and site.status.public_cert_pem == PEM


async def test_no_site_is_discovered_without_the_network_label_or_for_ourselves(
    store: Any,
) -> None:
    replica = GridState("east")
    gossip(replica, "west", "127.0.0.1:9")
    discovery = SiteDiscovery(store, "east")
    members = {"west": MemberState.ALIVE}
    assert not await discovery.reconcile(network(auto=False), [], members, replica)
    assert not await discovery.reconcile(network(), [], {"east": MemberState.ALIVE}, replica)
    assert await sites(store) == []


async def test_a_dead_member_leaves_after_the_ttl_and_returns_through_discovered(
    store: Any,
) -> None:
    replica = GridState("east")
    gossip(replica, "west", "127.0.0.1:9")
    await SiteDiscovery(store, "east").reconcile(
        network(ttl=30), [], {"west": MemberState.ALIVE}, replica
    )
    clock = Clock()
    controller = SiteController(store, "east", None, clock=clock)

    async def step(state: MemberState, ttl: float | None = 30.0) -> SitePhase:
        await controller.reconcile(await sites(store), {"west": state}, left_after_s=ttl)
        return controller.phases["west"]

    assert await step(MemberState.ALIVE) is SitePhase.DISCOVERED
    assert await step(MemberState.ALIVE) is SitePhase.CONNECTING
    assert await step(MemberState.SUSPECT) is SitePhase.CONNECTING
    clock.now += 3600  # suspect for an hour is not dead
    assert await step(MemberState.SUSPECT) is SitePhase.CONNECTING
    assert await step(MemberState.DEAD) is SitePhase.CONNECTING
    clock.now += 29.9
    assert await step(MemberState.DEAD) is SitePhase.CONNECTING
    clock.now += 0.1
    assert await step(MemberState.DEAD) is SitePhase.LEFT
    (site,) = await sites(store)
    assert site.status is not None and site.status.reason == "MemberDead"
    assert await step(MemberState.ALIVE) is SitePhase.DISCOVERED
    # Without a TTL the default is 300 s.
    assert await step(MemberState.ALIVE) is SitePhase.CONNECTING
    assert await step(MemberState.DEAD, None) is SitePhase.CONNECTING
    clock.now += 299
    assert await step(MemberState.DEAD, None) is SitePhase.CONNECTING
    clock.now += 1
    assert await step(MemberState.DEAD, None) is SitePhase.LEFT


async def test_a_graceful_leave_is_left_at_once(store: Any) -> None:
    replica = GridState("east")
    gossip(replica, "west", "127.0.0.1:9")
    await SiteDiscovery(store, "east").reconcile(
        network(), [], {"west": MemberState.ALIVE}, replica
    )
    controller = SiteController(store, "east", None, clock=Clock())
    await controller.reconcile(await sites(store), {"west": MemberState.ALIVE})
    await controller.reconcile(await sites(store), {"west": MemberState.LEFT})
    assert controller.phases["west"] is SitePhase.LEFT
    (site,) = await sites(store)
    assert site.status is not None and site.status.reason == "LeftMesh"


async def test_the_site_status_shows_what_its_records_offer_and_only_rewrites_changes(
    store: Any,
) -> None:
    replica = GridState("east")
    gossip(replica, "west", "127.0.0.1:9")
    await SiteDiscovery(store, "east").reconcile(
        network(), [], {"west": MemberState.ALIVE}, replica
    )
    controller = SiteController(store, "east", None, clock=Clock())
    models = [{"model": "llama", "capabilities": ["chat"], "providers": ["p"]}]
    offer = site_offer([], [AgentOffer("tools", "mcp", "search")])
    offer["models"], offer["inference"] = models, True
    members = {"west": MemberState.ALIVE}
    await controller.reconcile(await sites(store), members, offers={"west": offer})
    (site,) = await sites(store)
    assert site.status is not None
    caps = site.status.capabilities
    assert [c.model for c in caps.models] == ["llama"]
    assert (caps.inference, caps.agent_tools, caps.agent_to_agent) == (True, True, False)
    assert [(t.name, t.providers) for t in caps.tools] == [("search", ["mcp"])]
    writes = store.writes("GridSite")
    await controller.reconcile(await sites(store), members, offers={"west": offer})
    await controller.reconcile(await sites(store), members, offers={"west": offer})
    assert store.writes("GridSite") == writes + 1  # Discovered -> Connecting only


async def test_a_moved_gateway_lane_updates_the_discovered_site_keeping_its_pin(
    store: Any,
) -> None:
    replica = GridState("east")
    gossip(replica, "west", "127.0.0.1:9")
    discovery = SiteDiscovery(store, "east")
    members = {"west": MemberState.ALIVE}
    await discovery.reconcile(network(), [], members, replica)
    (site,) = await sites(store)
    obj = site.model_dump(by_alias=True, exclude_none=True, mode="json")
    obj["spec"]["trust"] = {"certFingerprint": "ab" * 32}
    obj.pop("status", None)
    await store.replace(obj)  # a person pins the site
    peer = GridState("west", base_revision=10_000)
    moved = GridStateSnapshot.empty("west", 10_000).set_lane(
        Lane.GATEWAY, GatewayLaneValue(egress_address="127.0.0.1:10")
    )
    for item in peer.update_local(moved):
        replica.apply(item)
    assert await discovery.reconcile(network(), await sites(store), members, replica)
    (site,) = await sites(store)
    assert site.spec.egress is not None and site.spec.egress.address == "127.0.0.1:10"
    assert site.spec.trust is not None and site.spec.trust.fingerprint_hex == "ab" * 32
    assert (site.spec.region, site.spec.zone) == ("eu", "eu-1")
