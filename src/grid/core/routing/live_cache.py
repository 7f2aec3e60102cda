"""The live records of a replica, kept per origin while its state is the same (`LiveRecordCache`).

Every round starts from `grid.core.routing.mesh_view.live_records` of the
replica's providers: each record of every trusted origin, those naming their
origin's site, remote ones within the stale TTL, sorted by origin, name and
provider id. A peer's state lane is immutable and the replica keeps the same
object until that peer publishes again, so a round in which one origin
changed needs only that origin's records read, checked and sorted again. The
cache keeps, per origin, its state object, its records in order (as
`OriginRecord` objects, the same ones round after round) and its oldest
sample: while that one is within the TTL, every record of the origin is, and
the block is taken whole. The result is exactly `live_records` of
``replica.providers()`` (a property test holds them equal).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Container, Iterable
from operator import attrgetter
from typing import NamedTuple

from grid.core.crdt.snapshot import StateLaneValue
from grid.core.routing.mesh_view import OriginRecord
from grid.core.routing.signals import FRESHNESS_MAX_AGE_S


class _Block(NamedTuple):
    """One origin's records, in the order `live_records` puts them."""

    state: StateLaneValue
    records: list[OriginRecord]
    oldest: float
    """The oldest ``observed_at`` of ``records`` (inf for none)."""
    observed: list[float]
    """Every ``observed_at`` of ``records``, oldest first."""


def _block(origin: str, state: StateLaneValue, last: _Block | None) -> _Block:
    """The records of ``state``, each the `OriginRecord` of ``last`` where its record is equal.

    A peer that changed one record publishes a state with every other record as
    before; taking those records' objects of the last round keeps them the same
    objects downstream, where each round looks again only at records that are not.
    """
    kept = {} if last is None else {r.provider_id: r for r in last.records}
    records = []
    for pid, r in sorted(state.live_providers().items()):
        if r.site != origin:
            continue
        old = kept.get(pid)
        if old is None or not (old.record is r or old.record == r):
            old = OriginRecord(origin, pid, r)
        records.append(old)
    records.sort(key=attrgetter("record.name"))  # stable: provider id order within a name
    # A record's observed_at is a number of seconds (never NaN: records check it).
    observed = sorted(r.record.observed_at for r in records)
    return _Block(state, records, observed[0] if observed else math.inf, observed)


def _first_after(observed: list[float], start: int, age_s: float, now_s: float) -> float:
    """The first moment after ``now_s`` at which a sample of ``observed[start:]`` is ``age_s``
    old (inf for none): the moments are as sorted as the samples."""
    i = max(start, bisect_right(observed, now_s, key=lambda o: o + age_s))
    return observed[i] + age_s if i < len(observed) else math.inf


class LiveRecordCache:
    """`live_records` of a replica's provider states, kept per origin between rounds."""

    def __init__(self) -> None:
        self._kept: dict[str, _Block] = {}
        self.read = 0
        """Origins whose records the last call read afresh."""
        self._live: list[tuple[_Block, bool]] = []
        """The blocks the last call took, each with whether it is remote."""
        self._at: tuple[float, float | None] = (0.0, None)
        """The last call's ``now_s`` and ``stale_ttl_s``."""

    def live(
        self,
        states: Iterable[tuple[str, StateLaneValue]],
        own_site: str,
        now_s: float,
        stale_ttl_s: float | None,
        trusted: Container[str] | None = None,
    ) -> list[OriginRecord]:
        """``live_records`` of the records of ``states`` (`GridState.provider_states`)."""
        kept: dict[str, _Block] = {}
        live: list[OriginRecord] = []
        taken: list[tuple[_Block, bool]] = []
        self.read = 0
        for origin, state in states:
            block = self._kept.get(origin)
            if block is None or block.state is not state:
                block = _block(origin, state, block)
                self.read += 1
            kept[origin] = block
            remote = origin != own_site
            if remote and trusted is not None and origin not in trusted:
                continue
            taken.append((block, remote))
            if remote and stale_ttl_s is not None and now_s - block.oldest > stale_ttl_s:
                live += (r for r in block.records if not now_s - r.record.observed_at > stale_ttl_s)
            else:
                live += block.records
        self._kept, self._live, self._at = kept, taken, (now_s, stale_ttl_s)
        return live

    def deadline(self) -> float:
        """The first moment after the last call's ``now_s`` at which a record it returned
        turns stale (`FRESHNESS_MAX_AGE_S` old) or, remote, is evicted (``stale_ttl_s``
        old); inf for none. Two searches per origin, not a look at every record."""
        now_s, ttl = self._at
        deadline = math.inf
        for block, remote in self._live:
            observed = block.observed
            start = 0
            if remote and ttl is not None:
                # The records the call kept: those not older than the TTL, the newest ones.
                start = bisect_left(observed, True, key=lambda o: not now_s - o > ttl)
                deadline = min(deadline, _first_after(observed, start, ttl, now_s))
            deadline = min(deadline, _first_after(observed, start, FRESHNESS_MAX_AGE_S, now_s))
        return deadline
