"""`ConsumerConfigWriter`: praxis.yaml in its ConfigMap and file, only on change, with status."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from grid.core.resources.network_spec import ConsumerSpec, SignalTransport
from grid.core.routing.render import render
from grid.operator.output import ConsumerConfigWriter, OverlayWriter

_spec = importlib.util.spec_from_file_location(
    "overlay_output_cases", Path(__file__).with_name("test_output.py")
)
assert _spec is not None and _spec.loader is not None
_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cases)
_render = _cases._render

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _config(clusters: list[str], **fields: Any) -> ConsumerSpec:
    endpoints = [
        {"cluster": c, "address": f"127.0.0.1:{9000 + i}", "transport": {"mode": "plaintext"}}
        for i, c in enumerate(clusters)
    ]
    return ConsumerSpec.model_validate({"enabled": True, "clusterEndpoints": endpoints, **fields})


async def _praxis(store: Any, name: str = "praxis-consumer-config") -> str:
    cm = await store.get("ConfigMap", name, namespace="gw")
    assert list(cm["data"]) == ["praxis.yaml"]
    return str(cm["data"]["praxis.yaml"])


async def test_rendered_praxis_yaml_lands_in_the_configmap_and_the_overlay_dir(
    store: Any, tmp_path: Path
) -> None:
    overlays = OverlayWriter(store, tmp_path)
    writer = ConsumerConfigWriter(store, overlays)
    rendered = _render(["a", "b"])
    status = await writer.write(rendered, _config(["a", "b"]))
    assert status["phase"] == "Rendered" and status["configMapName"] == "praxis-consumer-config"
    text = await _praxis(store)
    assert (tmp_path / "praxis.yaml").read_text() == text
    route = yaml.safe_load(text)["filter_chains"][0]["filters"][2]
    assert route["overlay_file"] == str((tmp_path / "grid-overlay.json").absolute())
    assert route["expected_scope"]["gateway"] == "edge"


async def test_without_an_overlay_dir_candidates_are_inline(store: Any) -> None:
    writer = ConsumerConfigWriter(store, OverlayWriter(store, None))
    await writer.write(_render(["a"]), _config(["a"], configMapName="my-praxis"))
    route = yaml.safe_load(await _praxis(store, "my-praxis"))["filter_chains"][0]["filters"][2]
    assert [c["cluster"] for c in route["candidates"]] == ["a"]


async def test_an_unchanged_file_is_not_rewritten_and_a_new_cluster_is(store: Any) -> None:
    writer = ConsumerConfigWriter(store, OverlayWriter(store, None))
    config = _config(["a", "b"])
    await writer.write(_render(["a"]), config)
    await writer.write(_render(["a"]), config)
    assert writer.writes == 1
    await writer.write(_render(["a", "b"]), config)
    assert writer.writes == 2
    assert "127.0.0.1:9001" in await _praxis(store)


async def test_a_fail_closed_render_reports_error_and_writes_nothing(store: Any) -> None:
    writer = ConsumerConfigWriter(store, OverlayWriter(store, None))
    status = await writer.write(_render(["a", "b"]), _config(["a"]))
    assert status["phase"] == "Error" and status["reason"] == "MissingClusterEndpoint"
    assert writer.writes == 0
    assert store.writes("ConfigMap") == 0


async def test_absent_or_disabled_consumer_config_is_reported_disabled(store: Any) -> None:
    writer = ConsumerConfigWriter(store, OverlayWriter(store, None))
    for config in (None, ConsumerSpec(enabled=False)):
        status = await writer.write(_render(["a"]), config)
        assert status["phase"] == "Disabled"
    assert store.writes("ConfigMap") == 0


async def test_a_restarted_writer_does_not_rewrite_an_unchanged_file(
    store: Any, tmp_path: Path
) -> None:
    config = _config(["a"])
    first = ConsumerConfigWriter(store, OverlayWriter(store, tmp_path))
    await first.write(_render(["a"]), config)
    again = ConsumerConfigWriter(store, OverlayWriter(store, tmp_path))
    await again.write(_render(["a"]), config)
    assert again.writes == 0
    (tmp_path / "praxis.yaml").write_text("stale")
    third = ConsumerConfigWriter(store, OverlayWriter(store, tmp_path))
    await third.write(_render(["a"]), config)
    assert third.writes == 1
    assert (tmp_path / "praxis.yaml").read_text() == await _praxis(store)


async def test_under_poll_the_route_filter_carries_scoring_and_sites(store: Any) -> None:
    writer = ConsumerConfigWriter(store, OverlayWriter(store, None))
    gossip = _render(["a"])
    await writer.write(gossip, _config(["a"]))
    route = yaml.safe_load(await _praxis(store))["filter_chains"][0]["filters"][2]
    assert "scoring" not in route and "sites" not in route
    network = gossip.network.model_copy(
        update={
            "spec": gossip.network.spec.model_copy(
                update={"signal_transport": SignalTransport(mode="poll")}
            )
        }
    )
    inputs = replace(_cases._inputs(["a"]), networks=[network])
    poll = render(inputs, site="east", gateway="edge", now=NOW)
    await writer.write(poll, _config(["a"]))
    route = yaml.safe_load(await _praxis(store))["filter_chains"][0]["filters"][2]
    assert route["scoring"]["weights"]["locality"] == 3.0
    assert route["scoring"]["latency_ceiling_ms"] == 5000.0
    assert route["sites"] == {"east": {"region": "r1", "zone": "z1"}}


async def test_a_rank_flip_does_not_rewrite_an_overlay_file_praxis_yaml(
    store: Any, tmp_path: Path
) -> None:
    writer = ConsumerConfigWriter(store, OverlayWriter(store, tmp_path))
    config = _config(["a", "b"])
    rendered = _render(["a", "b"])
    candidates = rendered.overlay["candidates"]
    flipped = replace(rendered, overlay={**rendered.overlay, "candidates": candidates[::-1]})
    assert [c["cluster"] for c in flipped.overlay["candidates"]] != [
        c["cluster"] for c in candidates
    ]
    await writer.write(rendered, config)
    text = await _praxis(store)
    status = await writer.write(flipped, config)
    assert status["phase"] == "Rendered"
    assert writer.renders == 1 and writer.writes == 1
    assert await _praxis(store) == text
    balancer = yaml.safe_load(text)["filter_chains"][0]["filters"][-1]
    assert [c["name"] for c in balancer["clusters"]] == ["a", "b"]
