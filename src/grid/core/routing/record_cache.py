"""What a round's mesh view keeps of the last round, place by place (`RemoteCache`, `EntryCache`).

A round in which one record changed hands in the very record objects of the
last round but at that record's place (`grid.core.routing.live_cache`), so the
places of two rounds are compared all at once and only the changed ones are
looked at: the remote providers of `grid.core.routing.mesh_view.mesh_inputs`
and the entries of its ``signals_document``. Anything the comparison cannot
vouch for builds afresh; property tests hold both to a build from scratch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import compress
from operator import attrgetter, is_, is_not
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from grid.core.crdt.record import ProviderRecord
    from grid.core.resources import InferenceProvider
    from grid.core.routing.mesh_view import OriginRecord, RemoteProvider
    from grid.core.routing.signals import ProviderSignals

PATCH_MAX_SHARE = 0.25
"""Past this share of the places changed, a build starts afresh."""


class RemoteCache:
    """The remote providers of the last `mesh_inputs`, place by place, to patch.

    A round in which one record changed hands in the very record objects of the
    last round but at that record's place (`grid.core.routing.live_cache`). The
    places are compared all at once; where each changed record keeps its site,
    name and routes, every record is taken or dropped as last time, and only
    the changed ones get their provider again. Anything else builds afresh.
    """

    def __init__(self) -> None:
        self._last: _Remote | None = None

    def keep(
        self,
        records: Sequence[OriginRecord],
        own_site: str,
        own_providers: Sequence[InferenceProvider],
        name: str,
        places: list[tuple[RemoteProvider, int]],
        remote: list[InferenceProvider],
    ) -> None:
        """Keep a build: each record's provider and routes, and its place in ``remote``."""
        self._last = _Remote(tuple(records), own_site, tuple(own_providers), name, places, remote)

    def patched(
        self,
        records: Sequence[OriginRecord],
        own_site: str,
        own_providers: Sequence[InferenceProvider],
        name: str,
        remote_of: Callable[[ProviderRecord, str], RemoteProvider],
    ) -> list[InferenceProvider] | None:
        """The last build's providers with the changed records' replaced, or None."""
        last = self._last
        if (
            last is None
            or (last.own_site, last.name) != (own_site, name)
            or len(last.records) != len(records)
            or len(last.own) != len(own_providers)
            or not all(map(is_, last.own, own_providers))
        ):
            return None
        records = tuple(records)
        changed = list(compress(range(len(records)), map(is_not, records, last.records)))
        if len(changed) > len(records) * PATCH_MAX_SHARE:
            return None
        places, remote = list(last.places), list(last.remote)
        for i in changed:
            old, new = last.records[i].record, records[i]
            if (
                new.origin == own_site
                or last.records[i].origin == own_site
                or (old.site, old.name) != (new.record.site, new.record.name)
            ):
                return None
            was, at = places[i]
            made = remote_of(new.record, name)
            if made is None or was is None:
                if made is not was:
                    return None  # taken or dropped in another way than last time
                continue
            if made[1] != was[1]:
                return None
            places[i] = (made, at)
            if at >= 0:
                remote[at] = made[0]
        self._last = last._replace(records=records, places=places, remote=remote)
        return list(remote)


class _Remote(NamedTuple):
    records: tuple[OriginRecord, ...]
    own_site: str
    own: tuple[InferenceProvider, ...]
    name: str
    places: list[tuple[RemoteProvider, int]]
    """Each record's provider and routes (None: not made) and its place (-1: dropped)."""
    remote: list[InferenceProvider]


class EntryCache:
    """The signals entries of the last round's records, in document order.

    An entry is sorted by its site and name (a stable sort, records in their
    order); a changed record whose entry keeps both keeps the sort's order,
    so the last order is applied to the entries with the changed ones replaced.
    """

    def __init__(self) -> None:
        self._last: tuple[tuple[OriginRecord, ...], list[ProviderSignals], list[int]] | None = None

    def entries(
        self,
        records: Iterable[OriginRecord],
        entry: Callable[[ProviderRecord], ProviderSignals],
    ) -> list[ProviderSignals]:
        """``entry`` of each record, sorted by (site, name) as `signals_document` sorts them."""
        given = tuple(records)
        patched = self._patched(given, entry)
        if patched is not None:
            return patched
        made = [entry(r.record) for r in given]
        keys = list(map(attrgetter("site", "name"), made))
        order = sorted(range(len(made)), key=keys.__getitem__)  # stable, as sorting entries
        self._last = (given, made, order)
        return list(map(made.__getitem__, order))

    def _patched(
        self, records: tuple[OriginRecord, ...], entry: Callable[[ProviderRecord], ProviderSignals]
    ) -> list[ProviderSignals] | None:
        last = self._last
        if last is None or len(last[0]) != len(records):
            return None
        before, made, order = last
        changed = list(compress(range(len(records)), map(is_not, records, before)))
        if len(changed) > len(records) * PATCH_MAX_SHARE:
            return None
        made = list(made)
        for i in changed:
            new, old = entry(records[i].record), made[i]
            if (new.site, new.name) != (old.site, old.name):
                return None
            made[i] = new
        self._last = (records, made, order)
        return list(map(made.__getitem__, order))
