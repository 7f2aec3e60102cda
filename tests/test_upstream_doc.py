"""docs/migrating-from-upstream.md names every upstream name Grid reads or writes.

The doc's closing tables are hand-written; this holds them to the code: each
upstream variable alias, probe outcome, ConfigMap key and annotation, and
consumerConfig or overlayStatus reason that Grid knows appears in them.
"""

from __future__ import annotations

from pathlib import Path

from grid.adapters.tls_probe import ProbeOutcome
from grid.core.overlay import consumer
from grid.core.overlay.configmap import (
    ANNOTATION_CONTENT_DIGEST,
    ANNOTATION_REVISION,
    ANNOTATION_SCHEMA_VERSION,
    LAYOUTS,
)
from grid.core.resources.overlay_status import APPLY_FAILED, RENDER_FAILED
from grid.core.vocabulary import OverlayFormat
from grid.operator.settings import UPSTREAM_ENV

DOC = Path(__file__).resolve().parents[1] / "docs" / "migrating-from-upstream.md"


def test_every_upstream_name_grid_knows_is_in_the_migration_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("## Every upstream name") :]
    names = [v for aliases in UPSTREAM_ENV.values() for v in aliases]
    names += ["GRID_SWIM_SEEDS", *(o.value for o in ProbeOutcome)]
    names += [
        "grid_gateway_probe_total",
        "grid_gateway_probe_duration_seconds",
        "grid_site_phase_transition_total",
    ]
    upstream = LAYOUTS[OverlayFormat.UPSTREAM]
    names += [upstream.config_key, upstream.envelope_key]
    names += [a.rsplit("/", 1)[1] for a in (ANNOTATION_CONTENT_DIGEST, ANNOTATION_REVISION)]
    names += [ANNOTATION_SCHEMA_VERSION, APPLY_FAILED, RENDER_FAILED]
    names += [consumer.RENDER_FAILED, consumer.CONFIG_ERROR, consumer.DISABLED]
    names += list(consumer.FAIL_CLOSED_REASONS)
    missing = [n for n in names if f"`{n}" not in table]
    assert missing == []
