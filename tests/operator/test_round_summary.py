"""A round's summary (`RoundSummary`) reads the models and freshness off its candidates late.

It must count exactly what a reading of each candidate as it was added counts:
the models named, and whether every candidate of each (site, cluster) is
fresh, across the several gateways of one round.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from grid.operator.overlay_loop import RoundSummary

candidate = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["llama", "qwen", "mistral"]),
        "site": st.sampled_from(["east", "west"]),
        "cluster": st.sampled_from(["c1", "c2", "c3"]),
        "fresh": st.booleans(),
    }
)
gateway = st.tuples(st.lists(candidate, max_size=12), st.booleans())


def _by_candidate(gateways: list[tuple[list[dict[str, Any]], bool]]) -> dict[str, Any]:
    """The summary's figures as one candidate at a time would count them."""
    models: set[str] = set()
    freshness: dict[tuple[str, str], bool] = {}
    for candidates, _ in gateways:
        models.update(str(c["name"]) for c in candidates)
        for c in candidates:
            where = (str(c["site"]), str(c["cluster"]))
            freshness[where] = freshness.get(where, True) and bool(c["fresh"])
    return {
        "gateways": [f"g{n}" for n in range(len(gateways))],
        "revisions": [f"r{n}" for n in range(len(gateways))],
        "candidates": sum(len(c) for c, _ in gateways),
        "written": sum(int(w) for _, w in gateways),
        "models": models,
        "freshness": list(freshness.items()),
    }


@given(st.lists(gateway, max_size=4))
def test_a_summary_counts_what_reading_each_candidate_counts(
    gateways: list[tuple[list[dict[str, Any]], bool]],
) -> None:
    summary = RoundSummary()
    for n, (candidates, written) in enumerate(gateways):
        summary.add(f"g{n}", f"r{n}", candidates, written)
    assert {
        "gateways": summary.gateways,
        "revisions": summary.revisions,
        "candidates": summary.candidates,
        "written": summary.written,
        "models": summary.models,
        "freshness": list(summary.freshness.items()),
    } == _by_candidate(gateways)
