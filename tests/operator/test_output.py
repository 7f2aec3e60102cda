"""Overlay output: ConfigMap names, atomic files, and writes only on a revision change."""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from grid.adapters.store.encoded import EncodedText
from grid.adapters.store.sqlite import SqliteStore
from grid.core.resources import API_VERSION, SITE_LABEL, GridNetwork, GridSite, InferenceProvider
from grid.core.routing.render import Rendered, RenderInputs, render
from grid.core.routing.render_cache import RenderCache
from grid.operator.output import (
    CONFIG_KEY,
    ENVELOPE_KEY,
    NAME_MAX,
    OverlayWriter,
    atomic_write,
    configmap_name,
    dumps,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


# -- configmap_name -----------------------------------------------------------------


def test_a_short_name_is_the_plain_pattern() -> None:
    assert configmap_name("prod", "edge") == "grid-overlay-prod-edge"


def test_a_name_of_exactly_63_characters_is_kept() -> None:
    gateway = "g" * (NAME_MAX - len("grid-overlay-n-"))
    name = configmap_name("n", gateway)
    assert len(name) == NAME_MAX
    assert name == f"grid-overlay-n-{gateway}"


def test_a_long_name_is_shortened_to_at_most_63_characters_deterministically() -> None:
    network, gateway = "a-very-long-network-name-for-tenancy", "and-an-even-longer-gateway-name-x"
    name = configmap_name(network, gateway)
    assert len(name) <= NAME_MAX
    assert name == configmap_name(network, gateway)
    assert name.startswith("grid-overlay-a-very-long-network")
    assert re.fullmatch(r".*-[0-9a-f]{8}", name)
    assert DNS_1123.match(name)


def test_long_names_sharing_a_prefix_stay_distinct() -> None:
    network = "n" * 60
    names = {configmap_name(network, f"gateway-{i}") for i in range(50)}
    assert len(names) == 50
    assert all(len(n) <= NAME_MAX for n in names)


def test_shortening_never_leaves_a_double_dash_before_the_digest() -> None:
    # The cut falls right after a dash in the network name.
    network = "x" * (NAME_MAX - 9 - len("grid-overlay-") - 1) + "-tail"
    name = configmap_name(network, "gateway")
    assert "--" not in name
    assert DNS_1123.match(name)


# -- atomic_write ---------------------------------------------------------------------


def test_atomic_write_creates_the_directory_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "out" / "grid-config.json"
    atomic_write(target, b"first")
    assert target.read_bytes() == b"first"
    atomic_write(target, b"second")
    assert target.read_bytes() == b"second"
    assert [p.name for p in target.parent.iterdir()] == ["grid-config.json"]


def test_atomic_write_replaces_the_file_rather_than_rewriting_it_in_place(tmp_path: Path) -> None:
    target = tmp_path / "grid-config.json"
    atomic_write(target, b"old")
    reader = target.open("rb")  # a reader holding the old file keeps seeing it whole
    atomic_write(target, b"new content")
    assert reader.read() == b"old"
    reader.close()
    assert target.read_bytes() == b"new content"


# -- OverlayWriter --------------------------------------------------------------------


def _inputs(providers: list[str]) -> RenderInputs:
    network = GridNetwork.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "GridNetwork",
            "metadata": {"name": "prod"},
            "spec": {"gatewayRefs": [{"name": "edge", "namespace": "gw", "localSiteName": "east"}]},
        }
    )
    site = GridSite.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "GridSite",
            "metadata": {"name": "east"},
            "spec": {"gridNetworkRef": "prod", "region": "r1", "zone": "z1"},
        }
    )
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": API_VERSION,
            "kind": "InferenceProvider",
            "metadata": {"name": name, "labels": {SITE_LABEL: "east"}},
            "spec": {
                "gridNetworkRef": "prod",
                "backendKind": "local",
                "providerKind": "self_hosted",
                "models": [{"name": "llama"}],
            },
        }
        for name in providers
    ]
    return RenderInputs(
        networks=(network,),
        sites=(site,),
        providers=tuple(InferenceProvider.model_validate(d) for d in docs),
    )


def _render(providers: list[str], now: datetime = NOW) -> Rendered:
    return render(_inputs(providers), site="east", gateway="edge", now=now)


def _revision(rendered: Rendered) -> str:
    return str(rendered.envelope["revision"]["value"])


async def _configmap(store: Any) -> dict[str, Any]:
    return dict(await store.get("ConfigMap", "grid-overlay-prod-edge", namespace="gw"))


async def test_the_first_write_creates_the_configmap_and_both_files(
    store: Any, tmp_path: Path
) -> None:
    writer = OverlayWriter(store, tmp_path)
    rendered = _render(["a"])
    assert await writer.write(rendered) is True
    cm = await _configmap(store)
    assert cm["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "grid-operator",
        "grid.praxis-proxy.io/network": "prod",
        "grid.praxis-proxy.io/gateway": "edge",
    }
    assert set(cm["data"]) == {CONFIG_KEY, ENVELOPE_KEY}
    assert cm["data"][CONFIG_KEY] == dumps(rendered.overlay)
    assert cm["data"][ENVELOPE_KEY] == dumps(rendered.envelope)
    assert (tmp_path / CONFIG_KEY).read_text() == dumps(rendered.overlay)
    assert json.loads((tmp_path / ENVELOPE_KEY).read_text()) == rendered.envelope
    assert sorted(p.name for p in tmp_path.iterdir()) == [CONFIG_KEY, ENVELOPE_KEY]
    assert writer.revision_of("prod", "edge") == _revision(rendered)
    assert writer.writes == 1
    assert store.calls["create", "ConfigMap"] == 1


async def test_an_identical_re_render_writes_nothing_anywhere(store: Any, tmp_path: Path) -> None:
    writer = OverlayWriter(store, tmp_path)
    await writer.write(_render(["a"]))
    version = (await _configmap(store))["metadata"]["resourceVersion"]
    inode = (tmp_path / CONFIG_KEY).stat().st_ino
    # A later render of the same state differs only in its timestamps.
    later = _render(["a"], NOW + timedelta(minutes=5))
    assert _revision(later) == _revision(_render(["a"]))
    for _ in range(3):
        assert await writer.write(later) is False
    assert writer.writes == 1
    assert store.writes("ConfigMap") == 1
    assert (await _configmap(store))["metadata"]["resourceVersion"] == version
    assert (tmp_path / CONFIG_KEY).stat().st_ino == inode


async def test_a_changed_revision_replaces_the_configmap_and_the_files(
    store: Any, tmp_path: Path
) -> None:
    writer = OverlayWriter(store, tmp_path)
    await writer.write(_render(["a"]))
    changed = _render(["a", "b"])
    assert await writer.write(changed) is True
    assert writer.writes == 2
    assert store.calls["replace", "ConfigMap"] == 1
    cm = await _configmap(store)
    assert json.loads(cm["data"][ENVELOPE_KEY])["revision"]["value"] == _revision(changed)
    assert json.loads((tmp_path / CONFIG_KEY).read_text()) == changed.overlay
    assert sorted(p.name for p in tmp_path.iterdir()) == [CONFIG_KEY, ENVELOPE_KEY]


async def test_a_restarted_writer_picks_up_the_stored_revision_and_does_not_rewrite(
    store: Any, tmp_path: Path
) -> None:
    await OverlayWriter(store, tmp_path).write(_render(["a"]))
    before = store.writes("ConfigMap")
    inode = (tmp_path / ENVELOPE_KEY).stat().st_ino
    restarted = OverlayWriter(store, tmp_path)
    assert await restarted.write(_render(["a"], NOW + timedelta(hours=1))) is False
    assert restarted.writes == 0
    assert store.writes("ConfigMap") == before
    assert (tmp_path / ENVELOPE_KEY).stat().st_ino == inode
    assert await restarted.write(_render(["a", "b"])) is True


async def test_a_restart_after_a_crash_between_configmap_and_files_rewrites_the_files(
    store: Any, tmp_path: Path
) -> None:
    # The ConfigMap holds the new revision, the files still hold the old one.
    await OverlayWriter(store, tmp_path).write(_render(["a"]))
    await OverlayWriter(store, None).write(_render(["a", "b"]))
    restarted = OverlayWriter(store, tmp_path)
    assert await restarted.write(_render(["a", "b"])) is True
    envelope = json.loads((tmp_path / ENVELOPE_KEY).read_text())
    assert envelope["revision"]["value"] == _revision(_render(["a", "b"]))


async def test_without_an_output_directory_only_the_configmap_is_written(store: Any) -> None:
    writer = OverlayWriter(store, None)
    assert await writer.write(_render(["a"])) is True
    assert (await _configmap(store))["data"][CONFIG_KEY] == dumps(_render(["a"]).overlay)
    assert await writer.write(_render(["a"])) is False


async def test_the_configmap_lives_in_the_gateways_namespace(store: Any, tmp_path: Path) -> None:
    await OverlayWriter(store, tmp_path).write(_render(["a"]))
    listed = await store.list("ConfigMap", namespace="gw")
    assert [c["metadata"]["name"] for c in listed] == [configmap_name("prod", "edge")]
    assert await store.list("ConfigMap", namespace="default") == []


async def test_several_gateways_at_one_site_each_get_their_own_directory(
    store: Any, tmp_path: Path
) -> None:
    writer = OverlayWriter(store, tmp_path)
    writer.per_gateway = True
    rendered = _render(["a"])
    assert await writer.write(rendered) is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edge"]
    assert (tmp_path / "edge" / CONFIG_KEY).read_text() == dumps(rendered.overlay)


async def test_a_render_through_a_cache_hands_the_store_its_json_literals(tmp_path: Path) -> None:
    """The kept literals spare the store escaping the overlay again; what it stores
    (object row and event) is the plain serialisation all the same."""
    sqlite = await SqliteStore.open(tmp_path / "store.db")
    try:
        writer = OverlayWriter(sqlite, tmp_path / "out")
        cache = RenderCache()
        for providers in (["a", "c"], ["a", "b", "c"]):
            rendered = render(_inputs(providers), site="east", gateway="edge", now=NOW, cache=cache)
            lines = rendered.file_lines
            config = EncodedText.of(lines.config, lines.config_literal)
            envelope = EncodedText.of(lines.envelope, lines.envelope_literal)
            assert isinstance(config, EncodedText) and isinstance(envelope, EncodedText)
            assert config.literal == json.dumps(dumps(rendered.overlay))
            assert envelope.literal == json.dumps(dumps(rendered.envelope))
            assert await writer.write(rendered) is True
        cm = await sqlite.get("ConfigMap", "grid-overlay-prod-edge", namespace="gw")
        assert cm["data"][CONFIG_KEY] == dumps(rendered.overlay)
    finally:
        await sqlite.close()
    conn = sqlite3.connect(tmp_path / "store.db")
    rows = conn.execute("SELECT body FROM objects WHERE kind='ConfigMap'").fetchall()
    events = conn.execute("SELECT body FROM events WHERE kind='ConfigMap'").fetchall()
    conn.close()
    plain = json.dumps(json.loads(rows[0][0]), sort_keys=True, separators=(",", ":"))
    assert rows[0][0] == events[-1][0] == plain
    assert _render(["a"]).file_lines.config_literal is None  # no cache, no literal
