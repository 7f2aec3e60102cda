"""The overlay ConfigMap in the two layouts a gateway can ask for (``overlayFormat``).

* ``grid``, the default (SPEC-DECISIONS §1): keys ``grid-config.json`` (the bare
  overlay) and ``grid-overlay.json`` (the envelope), no annotations, a name over 63
  characters shortened by SHA-256 (the operator's one shortener).
* ``upstream``: upstream Grid's layout, so a Praxis consumer or a tool written
  against upstream reads it unchanged: keys ``routing-config.json`` and
  ``routing-overlay.json``; the annotations `ANNOTATION_SCHEMA_VERSION`,
  `ANNOTATION_REVISION` and `ANNOTATION_CONTENT_DIGEST`, which repeat the
  envelope's; and upstream's long-name rule (`upstream_configmap_name`).

Both layouts carry the same two documents, byte for byte, and in both the files of
the embedded default are named after the keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grid.core.overlay.ids import fnv1a_32
from grid.core.vocabulary import OverlayFormat

ANNOTATION_SCHEMA_VERSION = "grid.praxis-proxy.io/overlay-schema-version"
ANNOTATION_REVISION = "grid.praxis-proxy.io/overlay-revision"
ANNOTATION_CONTENT_DIGEST = "grid.praxis-proxy.io/overlay-content-digest"

NAME_MAX = 63
"""Kubernetes name limit for the ConfigMap."""
UPSTREAM_PREFIX_MAX = 20
"""Characters of the network and of the gateway an upstream long name keeps."""


@dataclass(frozen=True)
class Layout:
    """The data keys of one format: the bare overlay's and the envelope's."""

    config_key: str
    envelope_key: str


LAYOUTS: Mapping[OverlayFormat, Layout] = {
    OverlayFormat.GRID: Layout("grid-config.json", "grid-overlay.json"),
    OverlayFormat.UPSTREAM: Layout("routing-config.json", "routing-overlay.json"),
}


def configmap_annotations(fmt: OverlayFormat, envelope: Mapping[str, Any]) -> dict[str, str]:
    """The ConfigMap annotations of ``fmt``: upstream's three, from the envelope; none for grid."""
    if fmt is not OverlayFormat.UPSTREAM:
        return {}
    return {
        ANNOTATION_SCHEMA_VERSION: str(envelope["schema_version"]),
        ANNOTATION_REVISION: str(envelope["revision"]["value"]),
        ANNOTATION_CONTENT_DIGEST: str(envelope["content_digest"]["value"]),
    }


def upstream_configmap_name(network: str, gateway: str) -> str:
    """``grid-overlay-{network}-{gateway}``, or upstream's rule past 63 characters.

    A long name keeps the first 20 characters of the network and of the gateway
    and appends the 8 hex digits of 32-bit FNV-1a over ``"{network}/{gateway}"``,
    as upstream Grid names the same ConfigMap.
    """
    name = f"grid-overlay-{network}-{gateway}"
    if len(name) <= NAME_MAX:
        return name
    digest = f"{fnv1a_32(f'{network}/{gateway}'.encode()):08x}"
    net, gw = network[:UPSTREAM_PREFIX_MAX], gateway[:UPSTREAM_PREFIX_MAX]
    return f"grid-overlay-{net}-{gw}-{digest}"
