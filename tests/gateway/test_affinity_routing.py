"""Affinity bindings (TTL, size bound) and the order candidates are tried in."""

from __future__ import annotations

from grid.gateway.affinity import AffinityTable
from grid.gateway.routing import attempts
from grid.gateway.snapshot import snapshot_from_candidates
from grid.testing.clock import FakeClock


def _raw(cluster: str, admission: str = "new_and_existing", name: str = "m") -> dict[str, object]:
    return {
        "kind": "inference_model",
        "name": name,
        "site": "s",
        "cluster": cluster,
        "admission_state": admission,
    }


def test_a_binding_expires_after_its_ttl_and_is_renewed_by_use() -> None:
    clock = FakeClock()
    table = AffinityTable(ttl_s=3600, max_size=10, clock=lambda: clock.now)
    table.bind("s", "a")
    clock.run_for(3599)
    assert table.get("s") == "a"
    table.bind("s", "a")
    clock.run_for(3599)
    assert table.get("s") == "a"
    clock.run_for(1)
    assert table.get("s") is None
    assert len(table) == 0


def test_the_least_recently_used_binding_goes_beyond_the_size() -> None:
    table = AffinityTable(ttl_s=3600, max_size=2, clock=lambda: 0.0)
    table.bind("one", "a")
    table.bind("two", "b")
    table.bind("one", "a")
    table.bind("three", "c")
    assert table.get("two") is None
    assert table.get("one") == "a" and table.get("three") == "c"
    assert table.evicted == 1


def test_attempts_follow_overlay_order_and_skip_existing_only() -> None:
    snap = snapshot_from_candidates(
        [
            _raw("a", "existing_only"),
            _raw("b"),
            _raw("other", name="x"),
            _raw("c"),
            _raw("d"),
            _raw("e"),
        ],
        None,
        "t",
    )
    assert [c.cluster for c in attempts(snap, "m", None, 2)] == ["b", "c", "d"]
    bound = snap.candidates[0].stable_id
    assert [c.cluster for c in attempts(snap, "m", bound, 2)] == ["a", "b", "c"]
    assert [c.cluster for c in attempts(snap, "m", snap.candidates[3].stable_id, 0)] == ["c"]
    assert attempts(snap, "missing", None, 2) == []
    assert [c.cluster for c in attempts(snap, "m", "gone", 1)] == ["b", "c"]


def test_a_candidate_without_stable_id_gets_the_derived_identity() -> None:
    snap = snapshot_from_candidates([_raw("a")], None, "t")
    assert snap.candidates[0].stable_id == "inference_model/m/s/a"
    assert snap.candidates[0].fresh is True
