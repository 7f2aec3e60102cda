"""The overlay ConfigMap's two layouts: Grid's keys, and upstream's keys, annotations and name."""

from __future__ import annotations

from grid.core.overlay.configmap import (
    ANNOTATION_CONTENT_DIGEST,
    ANNOTATION_REVISION,
    ANNOTATION_SCHEMA_VERSION,
    LAYOUTS,
    configmap_annotations,
    upstream_configmap_name,
)
from grid.core.overlay.ids import fnv1a_32
from grid.core.vocabulary import OverlayFormat

ENVELOPE = {
    "schema_version": "1.0.0",
    "revision": {"kind": "content_addressed", "algorithm": "sha256", "value": "ab" * 32},
    "content_digest": {"algorithm": "sha256", "value": "ab" * 32},
}


def test_the_keys_of_each_format() -> None:
    grid, upstream = LAYOUTS[OverlayFormat.GRID], LAYOUTS[OverlayFormat.UPSTREAM]
    assert (grid.config_key, grid.envelope_key) == ("grid-config.json", "grid-overlay.json")
    assert (upstream.config_key, upstream.envelope_key) == (
        "routing-config.json",
        "routing-overlay.json",
    )


def test_upstream_annotations_repeat_the_envelope_and_grid_has_none() -> None:
    assert configmap_annotations(OverlayFormat.GRID, ENVELOPE) == {}
    assert configmap_annotations(OverlayFormat.UPSTREAM, ENVELOPE) == {
        "grid.praxis-proxy.io/overlay-schema-version": "1.0.0",
        "grid.praxis-proxy.io/overlay-revision": "ab" * 32,
        "grid.praxis-proxy.io/overlay-content-digest": "ab" * 32,
    }
    assert ANNOTATION_SCHEMA_VERSION.startswith("grid.praxis-proxy.io/")
    assert {ANNOTATION_REVISION, ANNOTATION_CONTENT_DIGEST} <= set(
        configmap_annotations(OverlayFormat.UPSTREAM, ENVELOPE)
    )


def test_upstream_names_a_long_configmap_by_prefixes_and_fnv1a() -> None:
    # The published 32-bit FNV-1a vectors.
    assert fnv1a_32(b"") == 0x811C9DC5 and fnv1a_32(b"a") == 0xE40C292C
    assert upstream_configmap_name("prod", "edge") == "grid-overlay-prod-edge"
    network, gateway = "n" * 30, "g" * 40
    name = upstream_configmap_name(network, gateway)
    digest = f"{fnv1a_32(f'{network}/{gateway}'.encode()):08x}"
    assert name == f"grid-overlay-{'n' * 20}-{'g' * 20}-{digest}"
    assert len(name) <= 63
    fits = "x" * (63 - len("grid-overlay--") - 4)
    assert upstream_configmap_name(fits, "edge") == f"grid-overlay-{fits}-edge"
