"""The gateway's round-robin position survives overlay reloads and re-ranks (§14).

Under poll every new signals document re-ranks the overlay into a new
snapshot, and every overlay swap builds one too. The `Router` keeps each
model's turn outside the snapshots, so the rotation continues: here the
members are re-ordered on every snapshot and one request is routed per
snapshot, the worst case for a position kept by rank index, and each member
still takes exactly its share.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Any

from grid.gateway.metrics import GatewayMetrics
from grid.gateway.routing import Router
from grid.gateway.snapshot import Snapshot, policy_of, snapshot_from_candidates


def _snapshot(clusters: list[str], policy: str = "round_robin") -> Snapshot:
    raw: list[dict[str, Any]] = [
        {"kind": "inference_model", "name": "m", "site": "east", "cluster": c, "selection_group": 0}
        for c in clusters
    ]
    return snapshot_from_candidates(raw, None, "t", policy_of({"selection_policy": policy}, "o"))


def _router() -> Router:
    return Router(2, GatewayMetrics(["a", "b", "c"]), random.Random(0))


def test_one_request_per_re_ranked_snapshot_still_rotates() -> None:
    router = _router()
    orders = itertools.cycle([["a", "b", "c"], ["c", "a", "b"], ["b", "c", "a"], ["a", "c", "b"]])
    picks = Counter(
        router.attempts(_snapshot(next(orders)), "m", None)[0].cluster for _ in range(30)
    )
    assert picks == {"a": 10, "b": 10, "c": 10}


def test_a_swap_that_keeps_the_members_continues_the_rotation() -> None:
    router = _router()
    first = _snapshot(["a", "b", "c"])
    assert [router.attempts(first, "m", None)[0].cluster for _ in range(2)] == ["a", "b"]
    second = _snapshot(["c", "b", "a"])
    router.swapped(second)
    assert [router.attempts(second, "m", None)[0].cluster for _ in range(4)] == ["c", "a", "b", "c"]


def test_a_model_that_leaves_the_overlay_forgets_its_turn() -> None:
    router = _router()
    first = _snapshot(["a", "b", "c"])
    router.attempts(first, "m", None)
    router.swapped(snapshot_from_candidates([], None, "t"))
    router.swapped(first)
    assert router.attempts(first, "m", None)[0].cluster == "a"
