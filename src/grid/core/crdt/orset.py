"""Add-wins observed-remove sets for capabilities (models, tools, agents).

Every add creates a unique tag ``(replica_id, counter)``; no randomness is
needed because a replica numbers its own adds. A remove tombstones only the
tags it has *observed* for the element. A concurrent add elsewhere carries a
fresh tag the remover never saw, so after a merge that tag survives the stale
tombstones and the element stays present: the add wins.

The representation is canonical: ``entries`` keeps only live (un-tombstoned)
tags and drops elements with none, and ``tombstones`` keeps every removed tag.
Merge is then a union followed by the same normalisation, which makes it
commutative, associative and idempotent, and makes equal states compare equal.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

E = TypeVar("E", bound=Hashable)

Tag = tuple[str, int]
"""A unique add tag: the adding replica's id and its per-replica add counter."""


def _normalise(
    entries: Mapping[E, Iterable[Tag]], tombstones: frozenset[Tag]
) -> dict[E, frozenset[Tag]]:
    live: dict[E, frozenset[Tag]] = {}
    for element, tags in entries.items():
        kept = frozenset(tags) - tombstones
        if kept:
            live[element] = kept
    return live


@dataclass(frozen=True, slots=True, eq=True)
class ORSet(Generic[E]):
    """An immutable add-wins OR-Set; every operation returns a new set."""

    entries: Mapping[E, frozenset[Tag]] = field(default_factory=dict)
    tombstones: frozenset[Tag] = frozenset()

    @classmethod
    def build(cls, entries: Mapping[E, Iterable[Tag]], tombstones: Iterable[Tag]) -> ORSet[E]:
        """Build a normalised set from raw entries and tombstones (e.g. after decoding)."""
        dead = frozenset(tombstones)
        return cls(entries=_normalise(entries, dead), tombstones=dead)

    def __contains__(self, element: object) -> bool:
        return element in self.entries

    def __iter__(self) -> Iterator[E]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def elements(self) -> frozenset[E]:
        """The present elements: those with at least one live tag."""
        return frozenset(self.entries)

    def next_tag(self, replica_id: str, floor: int = 0) -> Tag:
        """The next fresh tag for ``replica_id``: past every tag it issued, and >= ``floor``.

        ``floor`` lets a restarted replica that lost its own tags skip past
        counters its earlier life used (the snapshot passes its lane revision).
        """
        counters = [c for r, c in self.tombstones if r == replica_id]
        counters.extend(c for tags in self.entries.values() for r, c in tags if r == replica_id)
        return (replica_id, max(max(counters, default=0) + 1, floor))

    def add(self, element: E, replica_id: str, floor: int = 0) -> ORSet[E]:
        """Add ``element`` under a fresh tag issued by ``replica_id``."""
        tag = self.next_tag(replica_id, floor)
        entries = dict(self.entries)
        entries[element] = entries.get(element, frozenset()) | {tag}
        return ORSet(entries=entries, tombstones=self.tombstones)

    def remove(self, element: E) -> ORSet[E]:
        """Tombstone the tags of ``element`` observed here; unseen concurrent adds survive."""
        observed = self.entries.get(element)
        if not observed:
            return self
        entries = dict(self.entries)
        del entries[element]
        return ORSet(entries=entries, tombstones=self.tombstones | observed)

    def merge(self, other: ORSet[E]) -> ORSet[E]:
        """Union entries and tombstones, then drop tombstoned tags."""
        tombstones = self.tombstones | other.tombstones
        union: dict[E, frozenset[Tag]] = dict(self.entries)
        for element, tags in other.entries.items():
            union[element] = union.get(element, frozenset()) | tags
        return ORSet(entries=_normalise(union, tombstones), tombstones=tombstones)


def merge_orset(a: ORSet[E], b: ORSet[E]) -> ORSet[E]:
    """Pure merge of two OR-Sets."""
    return a.merge(b)
