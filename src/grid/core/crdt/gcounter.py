"""Grow-only counters with one slot per site, for per-tenant spend.

A site increments only its own slot; the value is the sum of the slots, and a
merge takes the maximum of each slot. Under a partition every site therefore
sees a lower bound of the true total rather than a wrong one. A decrement, or
a write to another site's slot, is refused with `CounterRefusal`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from grid.errors import GridError


class CounterRefusal(GridError):
    """A G-Counter write was refused: a decrement, or a write to a foreign slot."""

    code = "counter_refused"


@dataclass(frozen=True, slots=True, eq=True)
class GCounter:
    """An immutable grow-only counter; zero slots are never stored."""

    slots: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def build(cls, slots: Mapping[str, int]) -> GCounter:
        """Build a counter from raw slots, refusing negative values."""
        for site, count in slots.items():
            if count < 0:
                raise CounterRefusal(
                    f"slot {site!r} would be negative", code="counter_negative_slot"
                )
        return cls(slots={site: count for site, count in slots.items() if count})

    @property
    def value(self) -> int:
        """The counter's value: the sum of every site's slot."""
        return sum(self.slots.values())

    def slot(self, site: str) -> int:
        """The count of one site's slot (0 when it has none)."""
        return self.slots.get(site, 0)

    def increment(self, writer_id: str, amount: int = 1, *, slot: str | None = None) -> GCounter:
        """Add ``amount`` to the writer's own slot.

        ``slot`` defaults to ``writer_id``; naming any other slot is refused,
        and so is a negative amount (a G-Counter only grows).
        """
        target = writer_id if slot is None else slot
        if target != writer_id:
            raise CounterRefusal(
                "a site may only increment its own slot", code="counter_foreign_slot"
            )
        if amount < 0:
            raise CounterRefusal("a grow-only counter cannot decrease", code="counter_decrement")
        if amount == 0:
            return self
        slots = dict(self.slots)
        slots[target] = slots.get(target, 0) + amount
        return GCounter(slots=slots)

    def merge(self, other: GCounter) -> GCounter:
        """Per-slot maximum (commutative, associative, idempotent)."""
        slots = dict(self.slots)
        for site, count in other.slots.items():
            if count > slots.get(site, 0):
                slots[site] = count
        return GCounter(slots=slots)


def merge_gcounter(a: GCounter, b: GCounter) -> GCounter:
    """Pure merge of two G-Counters."""
    return a.merge(b)
