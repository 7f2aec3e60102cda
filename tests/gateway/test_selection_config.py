"""Selection fields (§14) in praxis.yaml's route filter and in overlay files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.overlay.structure import check_overlay_structure
from grid.core.routing.selection import RANDOM, SelectionPolicy
from grid.gateway.config import ConfigError, parse_config
from grid.gateway.routing import attempts
from grid.gateway.server import Gateway
from grid.gateway.snapshot import (
    OverlayRejected,
    SelectionFieldError,
    policy_of,
    read_overlay,
    selection_fields,
)


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


def _overlay_file_config(tmp_path: Path, route_extra: dict[str, Any], **top: Any) -> Any:
    document = _document(route_extra, [])
    route = document["filter_chains"][0]["filters"][0]
    del route["candidates"]
    route["overlay_file"] = str(_overlay_file(tmp_path, **top))
    route["expected_scope"] = {"network": "n", "local_site": "east"}
    return parse_config(document)


@pytest.mark.parametrize(
    ("route", "top", "expected"),
    [
        (
            {"selection_policy": "round_robin"},
            {"selection_policy": "random", "selection_load_aware": True},
            SelectionPolicy(RANDOM, True),
        ),
        ({"selection_policy": "random", "selection_load_aware": True}, {}, SelectionPolicy()),
        ({}, {"selection_policy": "round_robin"}, SelectionPolicy("round_robin")),
    ],
)
def test_with_an_overlay_file_the_overlays_policy_governs(
    tmp_path: Path, route: dict[str, Any], top: dict[str, Any], expected: SelectionPolicy
) -> None:
    """docs/routing.md: the overlay's top level wins whole; absent there is deterministic."""
    config = _overlay_file_config(tmp_path, route, **top)
    assert config.inline is None
    assert Gateway(config).base_snapshot().policy == expected


def test_with_an_overlay_file_a_bad_route_policy_still_refuses_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^intelligent_route\.selection_policy"):
        _overlay_file_config(tmp_path, {"selection_policy": "fastest"}, selection_policy="random")


def test_inline_candidates_take_the_route_filters_policy() -> None:
    config = parse_config(_document({"selection_policy": "round_robin"}, [_cand("a"), _cand("b")]))
    assert config.inline is not None and config.inline.policy == SelectionPolicy("round_robin")


_ODD_VALUES = st.one_of(
    st.integers(-3, 1003), st.booleans(), st.none(), st.text(max_size=3), st.floats(0, 2)
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["selection_group", "traffic_weight", "capacity_weight"]), _ODD_VALUES
    ),
    st.dictionaries(
        st.sampled_from(["selection_policy", "selection_load_aware"]),
        st.one_of(_ODD_VALUES, st.sampled_from(["random", "round_robin", "least_loaded"])),
    ),
)
def test_the_gateway_and_the_overlay_verifier_accept_the_same_selection_fields(
    fields: dict[str, Any], top: dict[str, Any]
) -> None:
    """One owner of the rules (core/overlay/structure.py): the two readers never disagree."""
    overlay = {"network": "n", "local_site": "east", "candidates": [_cand("a", **fields)], **top}
    verifier_ok = check_overlay_structure(overlay) is None
    try:
        policy_of(overlay, "overlay")
        selection_fields(overlay["candidates"][0], "overlay.candidates[0]")
        gateway_ok = True
    except SelectionFieldError:
        gateway_ok = False
    assert gateway_ok == verifier_ok
