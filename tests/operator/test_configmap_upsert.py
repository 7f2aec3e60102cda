"""ConfigMap upserts replace from what they last stored, and read again only when refused."""

from __future__ import annotations

from typing import Any

import pytest

from grid.operator.output import ConfigMaps, upsert_configmap

NAME, NAMESPACE = "grid-overlay-prod-edge", "gw"
LABELS = {"app.kubernetes.io/managed-by": "grid-operator"}


def _count_reads(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the ConfigMaps Grid's code reads through ``store`` (the test's own reads too)."""
    reads: list[str] = []
    inner = store.get

    async def get(kind: str, name: str, *, namespace: str | None = None) -> Any:
        if kind == "ConfigMap":
            reads.append(name)
        return await inner(kind, name, namespace=namespace)

    monkeypatch.setattr(store, "get", get)
    return reads


async def _upsert(store: Any, known: ConfigMaps, data: dict[str, str]) -> dict[str, Any]:
    return await upsert_configmap(store, NAME, NAMESPACE, LABELS, data, known=known)


async def test_a_write_after_the_first_does_not_read_the_configmap_back(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    known: ConfigMaps = {}
    await _upsert(store, known, {"a": "1"})
    reads = _count_reads(store, monkeypatch)
    for value in ("2", "3"):
        stored = await _upsert(store, known, {"a": value})
        assert stored["data"] == {"a": value}
    await _upsert(store, known, {"b": "x"})
    assert reads == []
    cm = await store.get("ConfigMap", NAME, namespace=NAMESPACE)
    assert cm["data"] == {"a": "3", "b": "x"}
    assert (
        known[NAMESPACE, NAME]["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]
    )


async def test_a_write_refused_as_stale_reads_again_and_keeps_the_other_writers_keys(
    store: Any,
) -> None:
    known: ConfigMaps = {}
    await _upsert(store, known, {"a": "1"})
    # Someone else writes the ConfigMap: the kept copy's resourceVersion is stale now.
    theirs = dict(await store.get("ConfigMap", NAME, namespace=NAMESPACE))
    await store.replace({**theirs, "data": {**theirs["data"], "theirs": "t"}})
    stored = await _upsert(store, known, {"a": "2"})
    assert stored["data"] == {"a": "2", "theirs": "t"}
    cm = await store.get("ConfigMap", NAME, namespace=NAMESPACE)
    assert cm["data"] == {"a": "2", "theirs": "t"}
    assert (
        known[NAMESPACE, NAME]["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]
    )


async def test_a_configmap_removed_meanwhile_is_written_again(store: Any) -> None:
    known: ConfigMaps = {}
    await _upsert(store, known, {"a": "1", "b": "2"})
    await store.delete("ConfigMap", NAME, namespace=NAMESPACE)
    stored = await _upsert(store, known, {"a": "3"})
    # The embedded store refuses the replace and the write creates it; a Kubernetes
    # apply creates it at once, with the other keys this writer last stored.
    assert stored["data"]["a"] == "3"
    cm = await store.get("ConfigMap", NAME, namespace=NAMESPACE)
    assert cm["data"]["a"] == "3"
    assert (
        known[NAMESPACE, NAME]["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]
    )


async def test_a_failed_write_forgets_the_kept_copy(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    known: ConfigMaps = {}
    await _upsert(store, known, {"a": "1"})

    async def refused(obj: dict[str, Any]) -> dict[str, Any]:
        raise OSError("connection reset")

    with monkeypatch.context() as patched:
        patched.setattr(store, "replace", refused)
        with pytest.raises(OSError):
            await _upsert(store, known, {"a": "2"})
    assert known == {}
    stored = await _upsert(store, known, {"a": "3"})
    assert stored["data"] == {"a": "3"}
