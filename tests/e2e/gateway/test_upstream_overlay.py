"""An overlay as upstream Grid's renderer writes it for a site without a region.

Upstream renders ``selection_tier: "unknown"`` whenever a region is missing and
can write admission ``"none"`` (SPEC-DECISIONS §5's reader rule). Such an
overlay must verify with ``grid overlay verify`` and a real ``grid gateway``
must route by it: the ``unknown``-tier candidate serves, and a candidate whose
admission is ``none`` serves no request at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grid.core.overlay.ids import stable_id
from grid.testing.gateway import (
    MODEL,
    GatewayProcess,
    Upstream,
    candidate,
    envelope,
    overlay,
    render_praxis,
    write_json,
)

pytestmark = pytest.mark.e2e

OTHER = "only-closed"


def _upstream_candidate(name: str, site: str, cluster: str, admission: str) -> dict[str, Any]:
    return {
        **candidate(cluster, admission),
        "name": name,
        "site": site,
        "stable_id": stable_id("inference_model", name, site, cluster),
        "selection_tier": "unknown",
    }


def _upstream_document() -> dict[str, Any]:
    """Remote candidates of a region-less mesh, in upstream's order and groups."""
    document = overlay(
        _upstream_candidate(MODEL, "lab", "lab", "new_and_existing"),
        _upstream_candidate(MODEL, "central", "central", "none"),
        _upstream_candidate(OTHER, "central", "central", "none"),
    )
    for group, entry in enumerate(document["candidates"]):
        entry["selection_group"] = group
    document["selection_policy"] = "deterministic"
    return document


async def test_an_upstream_overlay_without_regions_verifies_and_routes(
    tmp_path: Path,
    upstreams: Callable[..., Awaitable[Upstream]],
    gateways: Callable[..., Awaitable[GatewayProcess]],
) -> None:
    lab, central = await upstreams("lab"), await upstreams("central")
    overlay_file = tmp_path / "routing-overlay.json"
    write_json(overlay_file, envelope(_upstream_document()))
    verdict = subprocess.run(
        [sys.executable, "-m", "grid", "overlay", "verify", str(overlay_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    rendered, public, admin = render_praxis(
        _upstream_document(), [lab, central], tmp_path, overlay_file=overlay_file
    )
    config = tmp_path / "praxis.yaml"
    config.write_text(rendered.text)
    gateway = await gateways(config, public, admin)
    async with aiohttp.ClientSession() as http:
        for _ in range(5):
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            async with http.post(gateway.url(), json=body) as response:
                assert response.status == 200, await response.text()
                assert json.loads(await response.text())["served_by"] == "lab"
        body = {"model": OTHER, "messages": [{"role": "user", "content": "hi"}]}
        async with http.post(gateway.url(), json=body) as response:
            refused = response.status
    assert refused >= 400
    assert len(lab.seen) == 5
    assert central.seen == [], "a candidate with admission none served a request"
