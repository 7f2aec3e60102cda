"""The GridSite spec: where a participating cluster is and how it is trusted."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from grid.core.resources.errors import field_error
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


CANONICAL_FINGERPRINTS_MAX = 8
"""Most pins one GridSite lists. Rotation needs two (old and new); a long list only
widens what a stolen key of a retired certificate could still impersonate."""


class SiteTrust(WireModel):
    """What this site's certificate must be to be trusted: any of its pins."""

    cert_fingerprint: Fingerprint | None = None
    """SHA-256 of the site's leaf certificate DER: 64 lowercase hex, colons optional."""
    canonical_fingerprints: list[Fingerprint] = Field(
        default_factory=list, max_length=CANONICAL_FINGERPRINTS_MAX
    )
    """More accepted pins (upstream Grid's field), so a certificate rotates without an
    outage; the site matches any listed pin."""

    @model_validator(mode="after")
    def _some_pin(self) -> SiteTrust:
        if self.cert_fingerprint is None and not self.canonical_fingerprints:
            raise field_error("certFingerprint", "a pin is required (or canonicalFingerprints)")
        return self

    @property
    def fingerprint_hex(self) -> str:
        """The first accepted pin as 64 lowercase hex digits without colons."""
        return self.accepted_fingerprints[0]

    @property
    def accepted_fingerprints(self) -> tuple[str, ...]:
        """Every accepted pin, normalized (64 lowercase hex), certFingerprint first."""
        pins = [self.cert_fingerprint] if self.cert_fingerprint else []
        out: list[str] = []
        for pin in (*pins, *self.canonical_fingerprints):
            hex_ = normalize_fingerprint(pin)
            if hex_ not in out:
                out.append(hex_)
        return tuple(out)


class GridSiteSpec(WireModel):
    """Desired state of a GridSite, a participating cluster."""

    grid_network_ref: ObjectName
    egress: Egress | None = None
    region: Text | None = None
    zone: Text | None = None
    sovereignty_zone: Text | None = None
    trust: SiteTrust | None = None

    @property
    def accepted_fingerprints(self) -> tuple[str, ...]:
        """Every pin a probed leaf may match, normalized; empty without ``trust``."""
        return self.trust.accepted_fingerprints if self.trust else ()
