"""examples/selection/: routingPolicy, selectionPolicy.mode and capacityWeight, rendered
and then selected from as a gateway does (SPEC-DECISIONS §14)."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from grid.cli import main
from grid.gateway.metrics import GatewayMetrics
from grid.gateway.routing import Router
from grid.gateway.snapshot import policy_of, snapshot_from_candidates

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "selection"


def _render(path: Path) -> dict[str, Any]:
    args = ["render", "-f", str(path), "--site", "east", "--gateway", "edge"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    overlay: dict[str, Any] = json.loads(result.stdout)["overlay"]
    return overlay


def test_score_first_puts_both_sites_in_one_group_with_their_capacity_weights() -> None:
    overlay = _render(EXAMPLE)
    assert overlay["selection_policy"] == "weighted_random"
    assert "selection_load_aware" not in overlay
    got = {(c["cluster"], c["selection_group"], c["traffic_weight"]) for c in overlay["candidates"]}
    assert got == {("vllm-east-big", 0, 4), ("vllm-east-small", 0, 1), ("vllm-central", 0, 2)}


def test_a_gateway_splits_the_example_by_capacity_weight() -> None:
    overlay = _render(EXAMPLE)
    snapshot = snapshot_from_candidates(
        overlay["candidates"], None, "example", policy_of(overlay, "overlay")
    )
    router = Router(0, GatewayMetrics([]), random.Random(7))
    draws = 70_000
    picks = Counter(
        router.attempts(snapshot, "llama-3.1-8b-instruct", None)[0].cluster for _ in range(draws)
    )
    for cluster, share in (
        ("vllm-east-big", 4 / 7),
        ("vllm-east-small", 1 / 7),
        ("vllm-central", 2 / 7),
    ):
        assert abs(picks[cluster] / draws - share) < 0.02, picks


def test_mode_deterministic_restores_upstreams_default(tmp_path: Path) -> None:
    text = (EXAMPLE / "grid.yaml").read_text()
    assert "mode: weightedRandom" in text
    (tmp_path / "grid.yaml").write_text(text.replace("mode: weightedRandom", "mode: deterministic"))
    overlay = _render(tmp_path)
    assert overlay["selection_policy"] == "deterministic"
    assert all(
        "traffic_weight" not in c and "capacity_weight" not in c for c in overlay["candidates"]
    )


def test_without_selection_policy_the_default_is_least_loaded(tmp_path: Path) -> None:
    text = (EXAMPLE / "grid.yaml").read_text()
    (tmp_path / "grid.yaml").write_text(
        text.replace("  selectionPolicy:\n    mode: weightedRandom\n", "")
    )
    overlay = _render(tmp_path)
    assert (overlay["selection_policy"], overlay["selection_load_aware"]) == ("random", True)
    weights = {c["cluster"]: c["capacity_weight"] for c in overlay["candidates"]}
    assert weights == {"vllm-east-big": 4, "vllm-east-small": 1, "vllm-central": 2}
