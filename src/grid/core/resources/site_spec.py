"""The GridSite spec: where a participating cluster is and how it is trusted."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grid.core.resources.types import (
    Fingerprint,
    HostPort,
    ObjectName,
    Text,
    WireModel,
    normalize_fingerprint,
)


class EgressTls(WireModel):
    """TLS of a site's egress endpoint."""

    mode: Literal["Mutual", "Plaintext"] = "Mutual"
    server_name: Text | None = None
    """SNI and expected name; absent means the egress host."""


class Egress(WireModel):
    """Where other sites reach this site."""

    address: HostPort
    tls: EgressTls = Field(default_factory=EgressTls)


class SiteTrust(WireModel):
    """What this site's certificate must be to be trusted."""

    cert_fingerprint: Fingerprint
    """SHA-256 of the site's leaf certificate DER: 64 lowercase hex, colons optional."""

    @property
    def fingerprint_hex(self) -> str:
        """The fingerprint as 64 lowercase hex digits without colons."""
        return normalize_fingerprint(self.cert_fingerprint)


class GridSiteSpec(WireModel):
    """Desired state of a GridSite, a participating cluster."""

    grid_network_ref: ObjectName
    egress: Egress | None = None
    region: Text | None = None
    zone: Text | None = None
    sovereignty_zone: Text | None = None
    trust: SiteTrust | None = None
