"""The overlay envelope (``grid-overlay.json``): revision, digest, scope and provenance.

The envelope wraps ``grid-config.json`` with a content-addressed revision so a
gateway can verify what it loads and a renderer can skip writes when nothing
changed (SPEC-DECISIONS §5). Provenance and timestamps never enter the revision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from grid.core.overlay.digest import canonical_digest

SCHEMA_VERSION = "1.0.0"
"""The envelope schema version this renderer writes."""

PRODUCER = "grid-operator"
"""The provenance producer name, fixed by §5 for every renderer."""


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 UTC with a ``Z`` suffix and millisecond precision."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class Scope:
    """Which gateway an overlay is for (the envelope's ``scope``)."""

    network: str
    gateway: str
    namespace: str
    local_site: str

    def as_dict(self) -> dict[str, str]:
        """The wire form of ``scope``."""
        return {
            "network": self.network,
            "gateway": self.gateway,
            "namespace": self.namespace,
            "local_site": self.local_site,
        }


@dataclass(frozen=True)
class Provenance:
    """Where an overlay came from; never part of the revision.

    ``source_*`` describe the GridNetwork the overlay was rendered from; uid and
    generation are ``None`` when the source has none (a file rendered offline).
    """

    producer_version: str
    source_name: str
    source_uid: str | None
    source_generation: int | None
    rendered_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """The wire form of ``provenance``."""
        return {
            "producer": PRODUCER,
            "producer_version": self.producer_version,
            "source_name": self.source_name,
            "source_uid": self.source_uid,
            "source_generation": self.source_generation,
            "rendered_at": format_timestamp(self.rendered_at),
        }


def build_envelope(
    overlay: Mapping[str, Any], scope: Scope, provenance: Provenance
) -> dict[str, Any]:
    """``grid-overlay.json``: the overlay with revision, digest, scope and provenance."""
    return envelope_with_digest(overlay, scope, provenance, canonical_digest(overlay))


def envelope_with_digest(
    overlay: Mapping[str, Any], scope: Scope, provenance: Provenance, digest: str
) -> dict[str, Any]:
    """The envelope of ``overlay`` whose digest the caller already computed."""
    return {
        "schema_version": SCHEMA_VERSION,
        "revision": {"kind": "content_addressed", "algorithm": "sha256", "value": digest},
        "content_digest": {"algorithm": "sha256", "value": digest},
        "scope": scope.as_dict(),
        "provenance": provenance.as_dict(),
        "overlay": dict(overlay),
    }
