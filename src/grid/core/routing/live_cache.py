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
from collections.abc import Container, Iterable
from operator import attrgetter
from typing import NamedTuple

from grid.core.crdt.snapshot import StateLaneValue
from grid.core.routing.mesh_view import OriginRecord


class _Block(NamedTuple):
    """One origin's records, in the order `live_records` puts them."""

    state: StateLaneValue
    records: list[OriginRecord]
    oldest: float
    """The oldest ``observed_at`` of ``records`` (inf for none)."""


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
    oldest = min((r.record.observed_at for r in records), default=math.inf)
    return _Block(state, records, oldest)


class LiveRecordCache:
    """`live_records` of a replica's provider states, kept per origin between rounds."""

    def __init__(self) -> None:
        self._kept: dict[str, _Block] = {}
        self.read = 0
        """Origins whose records the last call read afresh."""

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
            if remote and stale_ttl_s is not None and now_s - block.oldest > stale_ttl_s:
                live += (r for r in block.records if not now_s - r.record.observed_at > stale_ttl_s)
            else:
                live += block.records
        self._kept = kept
        return live
