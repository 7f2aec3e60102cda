"""Passive health: ejecting a candidate that keeps failing (SPEC-DECISIONS §14).

The gateway reports each attempt's outcome. Three consecutive failures (a
failed connect or a 5xx answer) eject the candidate from selection for 10 s;
each further ejection without a success in between doubles that, up to
300 s. A success resets everything. An ejected candidate is still a failover
target of last resort (`grid.core.routing.selection`), and it comes back by
itself when its ejection ends; it needs three new consecutive failures to be
ejected again. Outcomes reported while it is ejected do not extend the
ejection, but a success ends it.

Pure: the clock is injected. `forget` drops the entries of candidates that
left the snapshot, so the table never outgrows the overlay.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container
from dataclasses import dataclass

__all__ = ["HealthSettings", "PassiveHealth"]


@dataclass(frozen=True)
class HealthSettings:
    """Ejection thresholds: consecutive failures, first ejection, longest ejection."""

    failures_to_eject: int = 3
    base_ejection_s: float = 10.0
    max_ejection_s: float = 300.0

    def ejection_s(self, strikes: int) -> float:
        """How long the ``strikes``-th consecutive ejection lasts."""
        return min(self.max_ejection_s, self.base_ejection_s * 2.0 ** min(strikes - 1, 32))


@dataclass
class _Entry:
    failures: int = 0
    strikes: int = 0
    until: float | None = None


_NONE: frozenset[str] = frozenset()


class PassiveHealth:
    """Consecutive failures and ejections per candidate ``stable_id``."""

    def __init__(self, clock: Callable[[], float], settings: HealthSettings | None = None) -> None:
        self._clock = clock
        self.settings = settings or HealthSettings()
        self._entries: dict[str, _Entry] = {}
        self._ejected: set[str] = set()
        self._next_expiry = float("inf")
        self.ejections = 0
        """Ejections so far (every one, repeats included)."""

    def ejected(self) -> Collection[str]:
        """The candidates ejected now (ended ejections are lifted first)."""
        if not self._ejected:
            return _NONE
        now = self._clock()
        if now >= self._next_expiry:
            self._lift(now)
        return self._ejected

    def _lift(self, now: float) -> None:
        following = float("inf")
        for stable_id in list(self._ejected):
            entry = self._entries[stable_id]
            assert entry.until is not None
            if entry.until <= now:
                entry.until = None
                self._ejected.discard(stable_id)
            else:
                following = min(following, entry.until)
        self._next_expiry = following

    def success(self, stable_id: str) -> None:
        """An answer below 500: the candidate is healthy again."""
        entry = self._entries.pop(stable_id, None)
        if entry is not None and entry.until is not None:
            self._ejected.discard(stable_id)

    def failure(self, stable_id: str) -> bool:
        """A failed connect or a 5xx answer; True when it ejected the candidate."""
        entry = self._entries.get(stable_id)
        if entry is None:
            entry = self._entries[stable_id] = _Entry()
        if entry.until is not None and stable_id in self.ejected():
            return False
        entry.failures += 1
        if entry.failures < self.settings.failures_to_eject:
            return False
        entry.failures = 0
        entry.strikes += 1
        entry.until = self._clock() + self.settings.ejection_s(entry.strikes)
        self._ejected.add(stable_id)
        self._next_expiry = min(self._next_expiry, entry.until)
        self.ejections += 1
        return True

    def ejected_until(self, stable_id: str) -> float | None:
        """When the candidate's ejection ends, or None when it is not ejected."""
        entry = self._entries.get(stable_id)
        return entry.until if entry is not None and stable_id in self.ejected() else None

    def forget(self, keep: Container[str]) -> None:
        """Drop the entries of candidates not in ``keep`` (call on a snapshot swap)."""
        for stable_id in [s for s in self._entries if s not in keep]:
            del self._entries[stable_id]
            self._ejected.discard(stable_id)

    def __len__(self) -> int:
        return len(self._entries)
