"""The parsed copies a SQLite store keeps of large objects it wrote."""

from __future__ import annotations

from grid.adapters.store.parsed_copies import ParsedCopies


def test_only_large_bodies_are_kept_at_their_version_and_never_shared() -> None:
    copies = ParsedCopies(kept_max=2, large_bytes=100)
    big = {"data": {"k": "v" * 200}, "metadata": {"labels": {"a": "1"}}}
    copies.put(("ConfigMap", "grid", "small"), 1, {"data": {}}, body_bytes=99)
    copies.put(("ConfigMap", "grid", "big"), 2, big, body_bytes=250)
    assert copies.get(("ConfigMap", "grid", "small"), 1) is None
    assert copies.get(("ConfigMap", "grid", "big"), 3) is None  # moved on elsewhere
    big["metadata"]["labels"]["a"] = "changed after the write"
    first = copies.get(("ConfigMap", "grid", "big"), 2)
    assert first == {"data": {"k": "v" * 200}, "metadata": {"labels": {"a": "1"}}}
    assert first is not None
    first["metadata"]["labels"]["a"] = "changed by a reader"
    assert copies.get(("ConfigMap", "grid", "big"), 2) == {
        "data": {"k": "v" * 200},
        "metadata": {"labels": {"a": "1"}},
    }
    assert copies.hits == 2


def test_the_oldest_kept_goes_first_and_a_forgotten_one_is_gone() -> None:
    copies = ParsedCopies(kept_max=2, large_bytes=1)
    for n in range(3):
        copies.put(("ConfigMap", "grid", f"m{n}"), n, {"n": n}, body_bytes=10)
    assert copies.get(("ConfigMap", "grid", "m0"), 0) is None
    assert copies.get(("ConfigMap", "grid", "m1"), 1) == {"n": 1}
    copies.forget(("ConfigMap", "grid", "m1"))
    assert copies.get(("ConfigMap", "grid", "m1"), 1) is None
    assert copies.get(("ConfigMap", "grid", "m2"), 2) == {"n": 2}
