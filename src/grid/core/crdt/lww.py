"""Last-writer-wins registers ordered by ``(revision, writer_id)``.

Seed 003 fixes the rule: a higher revision wins, and equal revisions break ties
by the lexicographically greater ``writer_id``. The rule is deterministic, so
every site picks the same winner without a coordinator.

Two writes with the same ``(revision, writer_id)`` but different values should
never happen (a writer bumps its revision on every write), but a merge must stay
commutative even when it does. A third key, derived from the value by a caller
supplied ``tiebreak`` function (by default ``repr``), settles that case so the
merge is a total, pure function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")

Tiebreak = Callable[[object], str]


def default_tiebreak(value: object) -> str:
    """Order values by their ``repr``; values must have a deterministic ``repr``."""
    return repr(value)


@dataclass(frozen=True, slots=True)
class LwwRegister(Generic[V]):
    """One immutable register value stamped with ``(revision, writer_id)``."""

    value: V
    revision: int
    writer_id: str

    def __post_init__(self) -> None:
        if self.revision < 0:
            raise ValueError("LWW revision must be >= 0")

    @property
    def stamp(self) -> tuple[int, str]:
        """The ``(revision, writer_id)`` pair that orders writes."""
        return (self.revision, self.writer_id)

    def assign(self, value: V, writer_id: str) -> LwwRegister[V]:
        """Return a local write of ``value`` that wins over this register."""
        return LwwRegister(value=value, revision=self.revision + 1, writer_id=writer_id)

    def wins_over(self, other: LwwRegister[V], tiebreak: Tiebreak = default_tiebreak) -> bool:
        """Whether this register is strictly ordered after ``other``."""
        if self.stamp != other.stamp:
            return self.stamp > other.stamp
        return tiebreak(self.value) > tiebreak(other.value)

    def merge(self, other: LwwRegister[V], tiebreak: Tiebreak = default_tiebreak) -> LwwRegister[V]:
        """Return the winner of the two registers (commutative, associative, idempotent)."""
        return other if other.wins_over(self, tiebreak) else self


def merge_lww(
    a: LwwRegister[V], b: LwwRegister[V], tiebreak: Tiebreak = default_tiebreak
) -> LwwRegister[V]:
    """Pure merge of two registers: the one with the greater stamp wins."""
    return a.merge(b, tiebreak)
