"""Auto-discovered GridSites: the name rule, the manifest from the lanes, member mapping."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from grid.core.crdt.snapshot import GatewayLaneValue, MetadataLaneValue
from grid.core.resources import GridNetwork, GridSite
from grid.core.resources.discovery import (
    AUTO_DISCOVERED_LABEL,
    NETWORK_LABEL,
    as_member,
    discovered_manifest,
    discovered_site_name,
    discovery_enabled,
    discovery_on,
    member_of,
    spec_update,
)

GATEWAY = GatewayLaneValue(egress_address="10.0.0.4:8443")
META = MetadataLaneValue(region="eu-west", zone="eu-west-1a")


def test_the_name_is_network_dash_site_lowercased_with_other_characters_dashed() -> None:
    assert discovered_site_name("Prod", "Site_A.eu") == "prod-site-a-eu"
    assert discovered_site_name("-net-", "__x__") == "net----x"
    assert discovered_site_name("n", "a" * 400) == ("n-" + "a" * 400)[:253]


@given(st.text(max_size=300), st.text(max_size=300))
def test_every_name_is_a_valid_object_name_of_at_most_253_characters(net: str, site: str) -> None:
    name = discovered_site_name(net, site)
    assert len(name) <= 253
    assert re.fullmatch(r"[a-z0-9-]*", name)
    assert not name.startswith("-") and not name.endswith("-")


def test_the_manifest_carries_the_labels_egress_and_geography_and_no_trust() -> None:
    manifest = discovered_manifest("prod", "West", GATEWAY, META)
    site = GridSite.model_validate(manifest)
    assert site.name == "prod-west"
    assert site.metadata.labels == {NETWORK_LABEL: "prod", AUTO_DISCOVERED_LABEL: "true"}
    assert site.spec.egress is not None and site.spec.egress.address == "10.0.0.4:8443"
    assert (site.spec.region, site.spec.zone) == ("eu-west", "eu-west-1a")
    assert site.spec.trust is None
    assert member_of(site) == "West"
    assert as_member(site).name == "West"
    assert discovery_enabled(site)


def test_a_site_made_by_hand_keeps_its_name_and_needs_the_auto_discover_label() -> None:
    site = GridSite.model_validate(
        {"metadata": {"name": "west"}, "spec": {"gridNetworkRef": "prod"}}
    )
    assert member_of(site) == "west" and as_member(site) is site
    assert not discovery_enabled(site)


def test_the_network_asks_for_discovery_by_label_or_annotation() -> None:
    def network(meta: dict[str, object]) -> GridNetwork:
        return GridNetwork.model_validate({"metadata": {"name": "prod", **meta}, "spec": {}})

    key = "grid.praxis-proxy.io/auto-discover-sites"
    assert discovery_on(network({"labels": {key: "true"}}))
    assert discovery_on(network({"annotations": {key: "true"}}))
    assert not discovery_on(network({"labels": {key: "false"}}))
    assert not discovery_on(network({}))


def test_a_moved_lane_updates_egress_and_geography_but_keeps_a_persons_trust() -> None:
    manifest = discovered_manifest("prod", "west", GATEWAY, META)
    manifest["spec"]["trust"] = {"certFingerprint": "a" * 64}
    site = GridSite.model_validate(manifest)
    assert spec_update(site, "prod", GATEWAY, META) is None
    moved = spec_update(site, "prod", GatewayLaneValue(egress_address="10.0.0.9:8443"), META)
    assert moved is not None
    assert moved["egress"]["address"] == "10.0.0.9:8443"
    assert moved["trust"]["certFingerprint"] == "a" * 64
    assert moved["region"] == "eu-west"
    # An empty gateway lane (not yet gossiped) never erases a known egress.
    assert spec_update(site, "prod", GatewayLaneValue(), META) is None
