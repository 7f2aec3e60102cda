"""A round's summary (`RoundSummary.add`) reads the candidates column by column.

It must count exactly what a candidate-by-candidate reading counts: the models
named, and whether every candidate of each (site, cluster) so far is fresh,
across the several gateways of one round.
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


def _by_candidate(gateways: list[tuple[list[dict[str, Any]], bool]]) -> RoundSummary:
    """The summary as one candidate at a time would count it."""
    summary = RoundSummary()
    for n, (candidates, written) in enumerate(gateways):
        summary.gateways.append(f"g{n}")
        summary.revisions.append(f"r{n}")
        summary.models.update(str(c["name"]) for c in candidates)
        summary.candidates += len(candidates)
        for c in candidates:
            where = (str(c["site"]), str(c["cluster"]))
            summary.freshness[where] = summary.freshness.get(where, True) and bool(c["fresh"])
        summary.written += int(written)
    return summary


@given(st.lists(gateway, max_size=4))
def test_a_summary_counts_what_reading_each_candidate_counts(
    gateways: list[tuple[list[dict[str, Any]], bool]],
) -> None:
    summary = RoundSummary()
    for n, (candidates, written) in enumerate(gateways):
        summary.add(f"g{n}", f"r{n}", candidates, written)
    expected = _by_candidate(gateways)
    assert summary == expected
    assert list(summary.freshness.items()) == list(expected.freshness.items())
