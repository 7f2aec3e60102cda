"""Auto-discovered GridSites: which SWIM members get one, its name, and what it says.

When a GridNetwork carries ``grid.praxis-proxy.io/auto-discover-sites: "true"``
(as a label or an annotation, as upstream writes it), every remote alive SWIM
member without a GridSite gets one. Its name is `discovered_site_name`; its
labels name the network and mark it auto-discovered; its ``spec.egress.address``
comes from the member's gateway lane and its region and zone from the metadata
lane. The annotation `SITE_ANNOTATION` keeps the member's own site name, which
is the name its records and SWIM identity carry.

Trust is never assumed: the manifest sets no ``spec.trust``, so the site moves
Discovered -> Connecting and stays there until a person pins its fingerprint.
The cert lane's PEM (already refused by the replica when it carried a private
key) is shown in ``status.publicCertPem`` for that person to read.

The `grid.praxis-proxy.io/auto-discover` site label keeps its own meaning
(Pending -> Discovered for a SWIM-seen site); a discovered site, being created
from an alive member, counts as carrying it (`discovery_enabled`).
"""

from __future__ import annotations

import re
from typing import Any, Final

from grid.core.crdt.snapshot import GatewayLaneValue, MetadataLaneValue
from grid.core.resources.models import (
    API_VERSION,
    AUTO_DISCOVER_LABEL,
    LABEL_PREFIX,
    GridNetwork,
    GridSite,
)

AUTO_DISCOVER_SITES: Final = f"{LABEL_PREFIX}auto-discover-sites"
"""GridNetwork label (or annotation) whose value ``"true"`` creates a GridSite per member."""
AUTO_DISCOVERED_LABEL: Final = f"{LABEL_PREFIX}auto-discovered"
"""Label ``"true"`` on a GridSite the operator created from a SWIM member."""
NETWORK_LABEL: Final = f"{LABEL_PREFIX}network"
"""Label naming the GridNetwork of an auto-discovered GridSite."""
SITE_ANNOTATION: Final = f"{LABEL_PREFIX}site"
"""Annotation holding the SWIM member's site name on an auto-discovered GridSite."""
NAME_MAX: Final = 253
"""Longest Kubernetes object name (a DNS subdomain)."""

_OUTSIDE = re.compile(r"[^a-z0-9]")


def discovered_site_name(network: str, site: str) -> str:
    """``{network}-{site}`` lowercased, every char outside ``[a-z0-9]`` a dash, trimmed, cut.

    The cut is applied after trimming, and a dash the cut leaves at the end is
    trimmed too, so the name stays a valid object name.
    """
    name = _OUTSIDE.sub("-", f"{network}-{site}".lower()).strip("-")
    return name[:NAME_MAX].rstrip("-")


def discovery_on(network: GridNetwork) -> bool:
    """Whether the network asks for a GridSite per SWIM member."""
    meta = network.metadata
    return "true" in (
        meta.labels.get(AUTO_DISCOVER_SITES),
        meta.annotations.get(AUTO_DISCOVER_SITES),
    )


def is_discovered(site: GridSite) -> bool:
    """Whether the operator created this GridSite from a SWIM member."""
    return site.metadata.labels.get(AUTO_DISCOVERED_LABEL) == "true"


def member_of(site: GridSite) -> str:
    """The SWIM member (site name) a GridSite stands for."""
    if is_discovered(site):
        return site.metadata.annotations.get(SITE_ANNOTATION) or site.name
    return site.name


def discovery_enabled(site: GridSite) -> bool:
    """Whether SWIM may move the site Pending -> Discovered (the label, or discovered)."""
    return site.metadata.labels.get(AUTO_DISCOVER_LABEL) == "true" or is_discovered(site)


def as_member(site: GridSite) -> GridSite:
    """The site under its member's name, as the renderer and the records know it."""
    member = member_of(site)
    if member == site.name:
        return site
    meta = site.metadata.model_copy(update={"name": member})
    return site.model_copy(update={"metadata": meta})


def discovered_spec(
    network: str, gateway: GatewayLaneValue, metadata: MetadataLaneValue
) -> dict[str, Any]:
    """The ``spec`` of an auto-discovered GridSite from the member's lanes (no trust)."""
    spec: dict[str, Any] = {"gridNetworkRef": network}
    if gateway.egress_address:
        spec["egress"] = {"address": gateway.egress_address}
    if metadata.region:
        spec["region"] = metadata.region
    if metadata.zone:
        spec["zone"] = metadata.zone
    return spec


def discovered_manifest(
    network: str, site: str, gateway: GatewayLaneValue, metadata: MetadataLaneValue
) -> dict[str, Any]:
    """The GridSite the operator creates for remote member ``site`` of ``network``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "GridSite",
        "metadata": {
            "name": discovered_site_name(network, site),
            "labels": {NETWORK_LABEL: network, AUTO_DISCOVERED_LABEL: "true"},
            "annotations": {SITE_ANNOTATION: site},
        },
        "spec": discovered_spec(network, gateway, metadata),
    }


def spec_update(
    site: GridSite, network: str, gateway: GatewayLaneValue, metadata: MetadataLaneValue
) -> dict[str, Any] | None:
    """The new spec of a discovered site whose lanes moved, keeping a person's trust; or None.

    Only the lane-fed fields are compared (egress address, region, zone), so a
    person's pin, TLS server name or sovereignty zone are never overwritten.
    """
    current = site.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    wanted = discovered_spec(network, gateway, metadata)
    fed = {
        "egress": (current.get("egress") or {}).get("address"),
        "region": current.get("region"),
        "zone": current.get("zone"),
    }
    want = {
        "egress": (wanted.get("egress") or {}).get("address"),
        "region": wanted.get("region"),
        "zone": wanted.get("zone"),
    }
    if fed == want or (not want["egress"] and fed["egress"]):
        return None
    updated = dict(current)
    for key in ("region", "zone"):
        if want[key]:
            updated[key] = want[key]
        else:
            updated.pop(key, None)
    if want["egress"]:
        updated["egress"] = {**(current.get("egress") or {}), "address": want["egress"]}
    return updated
