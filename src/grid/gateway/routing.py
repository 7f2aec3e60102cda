"""Which candidates a request may try, in order (§11 routing and admission).

The first candidate in overlay order with the request's kind and model and
admission ``new_and_existing`` serves it. A session already bound to a
candidate (``x-grid-session``) goes back to that candidate first, even when it
is ``existing_only``; ``existing_only`` candidates serve no one else. Failover
tries the next eligible candidates, at most ``failover_max`` more.
"""

from __future__ import annotations

from grid.gateway.snapshot import NEW_AND_EXISTING, Candidate, Snapshot

KIND = "inference_model"
"""The candidate kind chat completions route to."""


def attempts(
    snapshot: Snapshot, model: str, bound: str | None, failover_max: int
) -> list[Candidate]:
    """The candidates to try, in order: at most ``1 + failover_max`` of them."""
    listed = snapshot.by_model.get((KIND, model), ())
    limit = 1 + failover_max
    chosen: list[Candidate] = []
    if bound is not None:
        first = next((c for c in listed if c.stable_id == bound), None)
        if first is not None:
            chosen.append(first)
    for candidate in listed:
        if len(chosen) >= limit:
            break
        if candidate.admission == NEW_AND_EXISTING and candidate not in chosen:
            chosen.append(candidate)
    return chosen[:limit]
