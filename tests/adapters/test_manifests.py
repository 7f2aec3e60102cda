"""Reading manifests from disk: a file, a directory of *.yaml, and unreadable input."""

from __future__ import annotations

from pathlib import Path

import pytest

from grid.adapters import manifests as adapter
from grid.adapters.manifests import load_manifests, read_sources
from grid.core.resources.manifest import ManifestError

NETWORK = """\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridNetwork
metadata:
  name: grid-demo
"""
SITE = """\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridSite
metadata:
  name: east
spec:
  gridNetworkRef: grid-demo
"""


def test_a_single_file(tmp_path: Path) -> None:
    path = tmp_path / "all.yaml"
    path.write_text(NETWORK + "---\n" + SITE)
    manifests = load_manifests(path)
    assert list(manifests.networks) == ["grid-demo"]
    assert list(manifests.sites) == ["east"]


def test_a_directory_reads_yaml_files_in_name_order_only(tmp_path: Path) -> None:
    (tmp_path / "b-site.yml").write_text(SITE)
    (tmp_path / "a-network.yaml").write_text(NETWORK)
    (tmp_path / "signals.json").write_text("{not yaml at all")
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "bad.yaml").write_text(":::")
    sources = read_sources(tmp_path)
    assert [Path(s.file).name for s in sources] == ["a-network.yaml", "b-site.yml"]
    assert list(load_manifests(tmp_path).sites) == ["east"]


def test_missing_path_is_a_problem(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifests(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(info.value)
    assert "no such file" in str(info.value)


def test_directory_without_manifests_is_a_problem(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifests(tmp_path)
    assert "no *.yaml files" in str(info.value)


def test_non_utf8_file_is_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ManifestError) as info:
        load_manifests(path)
    assert str(path) in str(info.value)
    assert "UTF-8" in str(info.value)


def test_oversized_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapter, "MANIFEST_FILE_BYTES_MAX", 16)
    path = tmp_path / "big.yaml"
    path.write_text(NETWORK)
    with pytest.raises(ManifestError) as info:
        load_manifests(path)
    assert "larger than 16 bytes" in str(info.value)


def test_problems_from_several_files_are_all_reported(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(NETWORK.replace("grid-demo", "Grid_Demo"))
    (tmp_path / "b.yaml").write_text(SITE.replace("grid-demo", "grid-other"))
    with pytest.raises(ManifestError) as info:
        load_manifests(tmp_path)
    lines = str(info.value).splitlines()
    assert len(lines) == 2
    assert "a.yaml" in lines[0] and "metadata.name" in lines[0]
    assert "b.yaml" in lines[1] and "spec.gridNetworkRef" in lines[1]
