"""Issue 26.6: a path that leaves /v1/ is 404 before any provider is contacted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.gateway.paths import remove_dot_segments, routable_target
from grid.testing.edge_rig import chat, edge_rig, raw_request

ESCAPES = [
    "/v1/../admin/secret",
    "/v1/%2e%2e/admin/secret",
    "/v1/%2E%2E/admin/secret",
    "/v1/.%2e/admin/secret",
    "/v1/chat/../../admin/secret",
    "/v1/..%2fadmin/secret",
    "/v1/%2e%2e%2fadmin/secret",
    "/v1/%252e%252e/admin/secret",
    "/v1/..\\admin/secret",
    "/v1/%5c../admin",
    "/v1/%00/../../admin",
    "/v1/./../admin",
    "/v1",
    "/admin/secret",
]


async def test_dot_segments_never_reach_a_provider_and_the_credential_stays_home(
    tmp_path: Path,
) -> None:
    body = json.dumps(chat()).encode()
    async with edge_rig(tmp_path) as rig:
        for target in ESCAPES:
            status, answer = await raw_request(rig.port, "POST", target, body)
            assert status == 404, (target, answer)
            assert json.loads(answer)["error"]["code"] == "not_found"
        assert rig.provider.seen == []
        # A path that stays under /v1/ is routed, normalised.
        status, _ = await raw_request(rig.port, "POST", "/v1/x/../chat/%63ompletions?a=1", body)
        assert status == 200
    [seen] = rig.provider.seen
    assert seen.raw_path == "/v1/chat/completions?a=1"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("/v1/a/./b/../c", "/v1/a/c"),
        ("/v1/a%20b", "/v1/a%20b"),
        ("/v1/%63hat?q=%2e%2e", "/v1/chat?q=%2e%2e"),
        ("/v1/a/..", "/v1/"),
        ("/v1/a/../..", None),
        ("/v1/%zz", None),
        ("/v1/%ff", None),
        ("http://evil/v1/x", None),
    ],
)
def test_targets(raw: str, expected: str | None) -> None:
    assert routable_target(raw) == expected


SEGMENT = st.sampled_from(["", ".", "..", "v1", "a", "%2e", "%2E%2e", "x%2f.."])


@given(st.lists(SEGMENT, max_size=8))
def test_a_routed_target_is_fixed_by_normalisation_and_under_v1(segments: list[str]) -> None:
    target = routable_target("/" + "/".join(segments))
    if target is not None:
        assert target.startswith("/v1/")
        assert routable_target(target) == target
        assert remove_dot_segments(target) == target
