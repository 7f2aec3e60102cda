"""``overlayFormat: upstream``: upstream's ConfigMap keys, annotations and name, and
``status.overlayStatus[]`` beside ``overlays[]``, on SQLite and the Kubernetes API emulator.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from grid.adapters.store.sqlite import SqliteStore
from grid.core.overlay import verify
from grid.core.overlay.configmap import upstream_configmap_name
from grid.core.resources import GridNetwork
from grid.core.resources.network_spec import ConsumerSpec
from grid.core.resources.overlay_status import APPLY_FAILED, Distribution, revision_entry
from grid.core.vocabulary import OverlayFormat
from grid.demo.mesh import DemoMesh
from grid.operator import output
from grid.operator.output import (
    BUDGETS_KEY,
    ConsumerConfigWriter,
    OverlayWriter,
    configmap_name,
    dumps,
)
from grid.operator.runtime import Operator
from grid.testing.poll import eventually

from .conftest import running, site_settings
from .test_output import NOW, _render, _revision

UPSTREAM = OverlayFormat.UPSTREAM
ROUTING = ("routing-config.json", "routing-overlay.json")
GRID = ("grid-config.json", "grid-overlay.json")
ANNOTATIONS = (
    "grid.praxis-proxy.io/overlay-schema-version",
    "grid.praxis-proxy.io/overlay-revision",
    "grid.praxis-proxy.io/overlay-content-digest",
)


async def configmap(store: Any) -> dict[str, Any]:
    return dict(await store.get("ConfigMap", "grid-overlay-prod-edge", namespace="gw"))


async def test_upstream_format_writes_upstreams_keys_and_annotations(
    store: Any, tmp_path: Path
) -> None:
    writer = OverlayWriter(store, tmp_path)
    rendered = _render(["a"])
    assert await writer.write(rendered, UPSTREAM) is True
    cm = await configmap(store)
    assert set(cm["data"]) == set(ROUTING)
    assert cm["data"]["routing-config.json"] == dumps(rendered.overlay)
    envelope = json.loads(cm["data"]["routing-overlay.json"])
    assert envelope == rendered.envelope
    assert verify(envelope).accepted
    revision = _revision(rendered)
    assert cm["metadata"]["annotations"] == dict(
        zip(ANNOTATIONS, ["1.0.0", revision, envelope["content_digest"]["value"]], strict=True)
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(ROUTING)
    # Identical state writes nothing; what was written is the distribution on record.
    assert await writer.write(_render(["a"], NOW + timedelta(minutes=5)), UPSTREAM) is False
    held = writer.distributed("prod", "edge")
    assert held == Distribution.of(rendered.envelope, cm["metadata"]["resourceVersion"])
    # A restarted writer reads it back from the ConfigMap and the files.
    restarted = OverlayWriter(store, tmp_path)
    assert await restarted.write(_render(["a"]), UPSTREAM) is False
    assert restarted.distributed("prod", "edge") == held


async def test_switching_format_rewrites_the_keys_and_drops_the_other_layout(
    store: Any, tmp_path: Path
) -> None:
    writer = OverlayWriter(store, tmp_path)
    assert await writer.write(_render(["a"])) is True
    await writer.write_budgets("prod", "edge", "gw", '{"tenants":[]}')
    assert await writer.write(_render(["a"]), UPSTREAM) is True
    cm = await configmap(store)
    assert set(cm["data"]) == {*ROUTING, BUDGETS_KEY}
    assert set(cm["metadata"]["annotations"]) == set(ANNOTATIONS)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*ROUTING, BUDGETS_KEY])
    # The budget view keeps the annotations; going back to grid drops them.
    await writer.write_budgets("prod", "edge", "gw", '{"tenants":[1]}', UPSTREAM)
    assert set((await configmap(store))["metadata"]["annotations"]) == set(ANNOTATIONS)
    assert await writer.write(_render(["a"]), OverlayFormat.GRID) is True
    cm = await configmap(store)
    assert set(cm["data"]) == {*GRID, BUDGETS_KEY}
    assert not cm["metadata"].get("annotations")


async def test_a_long_upstream_name_follows_upstreams_rule(store: Any) -> None:
    network, gateway = "n" * 30, "g" * 40
    assert upstream_configmap_name(network, gateway).startswith(f"grid-overlay-{'n' * 20}-")
    assert configmap_name(network, gateway, UPSTREAM) == upstream_configmap_name(network, gateway)
    assert configmap_name(network, gateway) != configmap_name(network, gateway, UPSTREAM)


def test_a_failed_write_keeps_the_distributed_revision_and_names_the_rendered_one() -> None:
    held = Distribution("a" * 64, "a" * 64, "1.0.0", "2026-01-01T00:00:00Z", 2, "17")
    kept = revision_entry(
        gateway="edge",
        namespace="gw",
        config_map="grid-overlay-prod-edge",
        generation=3,
        rendered="b" * 64,
        distributed=held,
        failure=APPLY_FAILED,
    )
    assert kept["phase"] == "Retained" and kept["reason"] == "OverlayApplyFailed"
    assert (kept["renderedRevision"], kept["distributedRevision"]) == ("b" * 64, "a" * 64)
    assert kept["configMapResourceVersion"] == "17" and kept["renderedAt"] == held.rendered_at
    never = revision_entry(
        gateway="edge",
        namespace="gw",
        config_map="grid-overlay-prod-edge",
        generation=3,
        rendered=None,
        distributed=None,
        failure="OverlayRenderFailed",
    )
    assert never["phase"] == "Error" and never["distributedRevision"] == ""
    assert "no overlay has been distributed" in never["message"]
    assert Distribution.of_status(kept) == held


async def test_the_operator_writes_upstream_keys_and_overlay_status(tmp_path: Path) -> None:
    mesh = DemoMesh(tmp_path, ["east"])
    await mesh.prepare()
    site = mesh.plan.sites["east"]
    store = await SqliteStore.open(site.store)
    (net,) = await store.list("GridNetwork")
    for ref in net["spec"]["gatewayRefs"]:
        ref["overlayFormat"] = "upstream"
    await store.replace(net)
    operator = Operator(site_settings(mesh, "east", render_interval_s=0.1), store)
    name, gateway = net["metadata"]["name"], site.gateway
    try:
        async with running(operator) as task:

            async def status() -> list[dict[str, Any]]:
                assert not task.done(), task
                obj = GridNetwork.model_validate(await store.get("GridNetwork", name))
                items = obj.status.overlay_status if obj.status else []
                return [o.model_dump(by_alias=True) for o in items]

            async def agrees() -> bool:
                items = await status()
                if len(items) != 1:
                    return False
                item = items[0]
                cm = await store.get(
                    "ConfigMap", upstream_configmap_name(name, gateway), namespace=item["namespace"]
                )
                envelope = json.loads(cm["data"]["routing-overlay.json"])
                return (
                    item["phase"] == "Distributed"
                    and item["reason"] == ""
                    and item["renderedRevision"] == item["distributedRevision"]
                    and item["distributedRevision"] == cm["metadata"]["annotations"][ANNOTATIONS[1]]
                    and item["contentDigest"] == envelope["content_digest"]["value"]
                    and item["configMapResourceVersion"] == cm["metadata"]["resourceVersion"]
                    and item["renderedAt"] == envelope["provenance"]["rendered_at"]
                    and item["schemaVersion"] == "1.0.0"
                    and item["candidateCount"] == len(envelope["overlay"]["candidates"]) > 0
                )

            await eventually(agrees, "overlayStatus names what the ConfigMap holds", timeout_s=30)
            assert (site.overlay_dir / "routing-overlay.json").exists()
            assert not (site.overlay_dir / "grid-overlay.json").exists()
            # Rounds of the same state rewrite nothing: no status churn from renderedAt.
            version = (await store.get("GridNetwork", name))["metadata"]["resourceVersion"]
            rounds = operator.overlays.renders.value("unchanged")
            await eventually(
                lambda: operator.overlays.renders.value("unchanged") >= rounds + 5, "rounds pass"
            )
            assert (await store.get("GridNetwork", name))["metadata"]["resourceVersion"] == version
    finally:
        await store.close()


# -- upstream's consumerConfig reasons ------------------------------------------------


def consumer_config() -> ConsumerSpec:
    endpoint = {"cluster": "a", "address": "127.0.0.1:9000", "transport": {"mode": "plaintext"}}
    return ConsumerSpec.model_validate({"enabled": True, "clusterEndpoints": [endpoint]})


async def test_a_disabled_consumer_config_says_upstreams_reason(store: Any) -> None:
    writer = ConsumerConfigWriter(store, OverlayWriter(store, None))
    for config in (None, ConsumerSpec(enabled=False)):
        status = await writer.write(_render(["a"]), config)
        assert (status["phase"], status["reason"]) == ("Disabled", "ConsumerConfigDisabled")


async def test_a_render_that_raises_is_consumer_config_render_failed(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise ValueError("sk-secret-from-the-overlay")

    monkeypatch.setattr(output, "render_consumer_config", refuse)
    writer = ConsumerConfigWriter(store, OverlayWriter(store, None))
    status = await writer.write(_render(["a"]), consumer_config())
    assert (status["phase"], status["reason"]) == ("Error", "ConsumerConfigRenderFailed")
    assert "sk-secret" not in status["message"] and store.writes("ConfigMap") == 0


async def test_an_unwritable_overlay_directory_is_consumer_config_error(
    store: Any, tmp_path: Path
) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the directory should be")
    writer = ConsumerConfigWriter(store, OverlayWriter(store, blocked))
    status = await writer.write(_render(["a"]), consumer_config())
    assert (status["phase"], status["reason"]) == ("Error", "ConsumerConfigError")
    assert str(tmp_path) not in status["message"]
