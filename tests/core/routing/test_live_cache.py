"""A replica's live records kept per origin (`LiveRecordCache`) are `live_records`, every round.

Random rounds put, change and remove records at several origins (and at the
operator's own), publish records naming another site, move the clock across
the stale TTL, change the TTL and the set of trusted sites; after each one the
cache must give exactly the records, in the order, of `live_records` of
``replica.providers()``.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.crdt.replica import GridState
from grid.core.routing.live_cache import LiveRecordCache
from grid.core.routing.mesh_view import OriginRecord, live_records
from grid.core.routing.signals import FRESHNESS_MAX_AGE_S

OWN = "s0"
ORIGINS = ("s0", "s1", "s2", "s3")
START = 1_800_000_000.0

put = st.tuples(
    st.just("put"),
    st.sampled_from(ORIGINS),
    st.sampled_from(["a", "b", "c", "d"]),
    st.sampled_from(["m", "n", "o"]),
    st.booleans(),
    st.sampled_from([0.0, 20.0, 30.0, 59.9, 60.0, 299.0, 300.0, 301.0, 5000.0, 1e9]),
)
step = st.one_of(
    put,
    st.tuples(st.just("remove"), st.sampled_from(ORIGINS), st.sampled_from(["a", "b", "c", "d"])),
    st.tuples(st.just("advance"), st.sampled_from([0.0, 1.0, 200.0, 400.0])),
    st.tuples(st.just("ttl"), st.sampled_from([None, 20.0, 60.0, 300.0])),
    st.tuples(st.just("trust"), st.one_of(st.none(), st.frozensets(st.sampled_from(ORIGINS)))),
    st.just(("same",)),
)


class Mesh:
    """A replica at ``OWN`` fed by one GridState per other origin."""

    def __init__(self) -> None:
        self.replica = GridState(OWN)
        self.peers = {o: GridState(o) for o in ORIGINS if o != OWN}
        self.now = START
        self.ttl: float | None = 300.0
        self.trusted: frozenset[str] | None = None

    def publish(self, origin: str, change: Any) -> None:
        state = self.replica if origin == OWN else self.peers[origin]
        items = state.update_local(change(state.local))
        if origin != OWN:
            for item in items:
                self.replica.apply(item)

    def apply(self, change: tuple[Any, ...]) -> None:
        match change[0]:
            case "put":
                _, origin, pid, name, own_site, age = change
                record = ProviderRecord(
                    name=name,
                    cluster=f"{name}-{pid}",
                    site=origin if own_site else "elsewhere",
                    backend_kind="local",
                    models=("llama",),
                    healthy=True,
                    observed_at=self.now - age,
                    signals=RecordSignals(queue_depth=0.1),
                    phase="Available",
                )
                self.publish(origin, lambda snap: snap.put_provider(pid, record))
            case "remove":
                self.publish(change[1], lambda snap: snap.remove_provider(change[2]))
            case "advance":
                self.now += change[1]
            case "ttl":
                self.ttl = change[1]
            case "trust":
                self.trusted = change[1]


def _deadline_afresh(records: list[OriginRecord], ttl: float | None, now_s: float) -> float:
    """The first moment after ``now_s`` at which one of ``records`` turns stale or is evicted,
    looking at every record."""
    deadline = math.inf
    for item in records:
        observed = item.record.observed_at
        moments = [observed + FRESHNESS_MAX_AGE_S]
        if ttl is not None and item.origin != OWN:
            moments.append(observed + ttl)
        deadline = min([deadline, *(m for m in moments if now_s < m)])
    return deadline


def _key(records: list[OriginRecord]) -> list[tuple[str, str, ProviderRecord]]:
    return [(r.origin, r.provider_id, r.record) for r in records]


@settings(max_examples=300, deadline=None)
@given(st.lists(put, min_size=1, max_size=10), st.lists(step, min_size=1, max_size=25))
def test_kept_live_records_are_live_records_of_the_replica_every_round(
    first: list[tuple[Any, ...]], steps: list[tuple[Any, ...]]
) -> None:
    mesh, cache = Mesh(), LiveRecordCache()
    for change in [*first, *steps]:
        mesh.apply(change)
        kept = cache.live(mesh.replica.provider_states(), OWN, mesh.now, mesh.ttl, mesh.trusted)
        scratch = live_records(
            (OriginRecord(o, pid, r) for o, pid, r in mesh.replica.providers()),
            OWN,
            mesh.now,
            mesh.ttl,
            mesh.trusted,
        )
        assert _key(kept) == _key(scratch), change
        assert cache.deadline() == _deadline_afresh(scratch, mesh.ttl, mesh.now), change


def test_a_round_after_one_origin_published_reads_only_that_origin() -> None:
    mesh, cache = Mesh(), LiveRecordCache()
    for origin in ORIGINS:
        for pid in "abc":
            mesh.apply(("put", origin, pid, "m", True, 0.0))
    first = cache.live(mesh.replica.provider_states(), OWN, mesh.now, mesh.ttl)
    assert cache.read == len(ORIGINS)
    mesh.apply(("put", "s2", "b", "n", True, 10.0))
    second = cache.live(mesh.replica.provider_states(), OWN, mesh.now, mesh.ttl)
    assert cache.read == 1
    assert len(second) == len(first) == 3 * len(ORIGINS)
    assert [r for r in second if r.origin == "s1"] == [r for r in first if r.origin == "s1"]
    assert all(a is b for a, b in zip(first[:3], second[:3], strict=True))


def test_a_republished_origin_keeps_the_record_objects_of_its_unchanged_records() -> None:
    mesh, cache = Mesh(), LiveRecordCache()
    for pid in "abc":
        mesh.apply(("put", "s2", pid, "m", True, 0.0))
    first = cache.live(mesh.replica.provider_states(), OWN, mesh.now, mesh.ttl)
    mesh.apply(("put", "s2", "b", "m", True, 5.0))
    second = cache.live(mesh.replica.provider_states(), OWN, mesh.now, mesh.ttl)
    assert cache.read == 1
    assert [r.provider_id for r in second] == ["a", "b", "c"]
    assert second[0] is first[0] and second[2] is first[2]
    assert second[1] is not first[1]
    assert second[1].record.observed_at == mesh.now - 5.0


def test_the_deadline_is_the_next_freshness_or_eviction_moment() -> None:
    mesh, cache = Mesh(), LiveRecordCache()
    mesh.ttl = 20.0
    mesh.apply(("put", "s0", "a", "m", True, 40.0))
    mesh.apply(("put", "s1", "b", "m", True, 10.0))
    cache.live(mesh.replica.provider_states(), OWN, mesh.now, mesh.ttl)
    assert cache.deadline() == mesh.now + 10.0  # b leaves the view
    cache.live(mesh.replica.provider_states(), OWN, mesh.now, None)
    assert cache.deadline() == mesh.now + FRESHNESS_MAX_AGE_S - 40.0  # a turns stale
    cache.live(mesh.replica.provider_states(), OWN, mesh.now + 500.0, None)
    assert cache.deadline() == math.inf


def test_a_record_exactly_the_ttl_old_is_kept_and_its_staleness_still_counts() -> None:
    mesh, cache = Mesh(), LiveRecordCache()
    mesh.ttl = 20.0
    mesh.apply(("put", "s1", "b", "m", True, 20.0))
    assert len(cache.live(mesh.replica.provider_states(), OWN, mesh.now, mesh.ttl)) == 1
    assert cache.deadline() == mesh.now + FRESHNESS_MAX_AGE_S - 20.0
