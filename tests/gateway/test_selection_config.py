"""Selection fields (§14) in praxis.yaml's route filter and in overlay files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grid.core.routing.selection import RANDOM, SelectionPolicy
from grid.gateway.config import ConfigError, parse_config
from grid.gateway.routing import attempts
from grid.gateway.snapshot import OverlayRejected, read_overlay


def _document(route_extra: dict[str, Any], candidates: list[dict[str, Any]]) -> Any:
    route = {
        "filter": "intelligent_route",
        "local_site": "east",
        "candidates": candidates,
        "sites": {"east": {"region": "r1", "zone": "z1"}, "west": {"region": "r2"}},
        **route_extra,
    }
    return {
        "listeners": [{"name": "p", "address": "127.0.0.1:1", "filter_chains": ["c"]}],
        "filter_chains": [
            {
                "name": "c",
                "filters": [
                    route,
                    {"filter": "load_balancer", "clusters": [{"name": "a", "endpoints": ["h:1"]}]},
                ],
            }
        ],
        "admin": {"address": "127.0.0.1:2"},
    }


def _cand(cluster: str, site: str = "east", **extra: Any) -> dict[str, Any]:
    return {"kind": "inference_model", "name": "m", "site": site, "cluster": cluster, **extra}


def test_the_route_filter_carries_policy_groups_and_weights() -> None:
    config = parse_config(
        _document(
            {"selection_policy": "random", "selection_load_aware": True},
            [
                _cand("a", selection_group=0, capacity_weight=4),
                _cand("b", selection_group=0, traffic_weight=7),
                _cand("c", selection_group=1),
            ],
        )
    )
    snap = config.inline
    assert snap is not None
    assert snap.policy == SelectionPolicy(RANDOM, True) and snap.policy.least_loaded
    got = [(c.selection_group, c.traffic_weight, c.capacity_weight) for c in snap.candidates]
    assert got == [(0, 1, 4), (0, 7, 1), (1, 1, 1)]


def test_absent_groups_are_derived_by_admission_tier_and_freshness() -> None:
    config = parse_config(
        _document(
            {},
            [
                _cand("a"),
                _cand("b"),
                _cand("w", site="west"),
                _cand("s", fresh=False),
                _cand("e", admission_state="existing_only"),
            ],
        )
    )
    assert config.inline is not None
    assert config.inline.policy == SelectionPolicy()
    assert [c.selection_group for c in config.inline.candidates] == [0, 0, 1, 2, 3]


@pytest.mark.parametrize(
    ("route", "candidate", "field"),
    [
        ({"selection_policy": "least_loaded"}, {}, "selection_policy"),
        ({"selection_load_aware": "yes"}, {}, "selection_load_aware"),
        ({}, {"selection_group": -1}, "selection_group"),
        ({}, {"selection_group": True}, "selection_group"),
        ({}, {"traffic_weight": 0}, "traffic_weight"),
        ({}, {"capacity_weight": 1001}, "capacity_weight"),
    ],
)
def test_bad_selection_fields_are_refused_by_name(
    route: dict[str, Any], candidate: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError, match=field):
        parse_config(_document(route, [_cand("a", **candidate)]))


def test_admission_none_serves_no_one_not_even_a_bound_session() -> None:
    config = parse_config(_document({}, [_cand("a", admission_state="none"), _cand("b")]))
    snap = config.inline
    assert snap is not None
    bound = snap.candidates[0].stable_id
    assert [c.cluster for c in attempts(snap, "m", bound, 2)] == ["b"]


def _overlay_file(tmp_path: Path, **top: Any) -> Path:
    path = tmp_path / "grid-config.json"
    document = {
        "network": "n",
        "local_site": "east",
        "candidates": [_cand("a", selection_group=0), _cand("b", selection_group=0)],
        **top,
    }
    path.write_text(json.dumps(document))
    return path


def test_an_overlay_file_carries_its_policy(tmp_path: Path) -> None:
    snap = read_overlay(_overlay_file(tmp_path, selection_policy="round_robin"), None, 1 << 20)
    assert snap.policy.mode == "round_robin"
    firsts = [attempts(snap, "m", None, 0)[0].cluster for _ in range(4)]
    assert firsts == ["a", "b", "a", "b"]


def test_an_overlay_with_a_bad_policy_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(OverlayRejected) as caught:
        read_overlay(_overlay_file(tmp_path, selection_policy="fastest"), None, 1 << 20)
    assert caught.value.reason == "malformed_structure"
