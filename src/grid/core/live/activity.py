"""Recent membership activity: suspicions, deaths and refutations as they happen.

The SWIM node tells its owner about every membership change (`Notify`). A member
that was suspect and is then alive again at a higher incarnation refuted the
suspicion; that is worth naming, because it is the protocol working. The log is
bounded: the view shows the newest ``capacity`` entries and forgets older ones.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

ACTIVITY_MAX = 64
"""Membership events one view keeps (newest first). More shows a longer history
on the page; every one is sent again with each ``members`` event."""


@dataclass(frozen=True)
class Activity:
    """One membership event as the page shows it."""

    at: str
    """When the observer learned it (RFC 3339, UTC)."""
    observer: str
    member: str
    kind: str
    """``alive``, ``suspect``, ``dead``, ``left`` or ``refuted``."""
    incarnation: int

    def as_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "at": self.at,
            "observer": self.observer,
            "member": self.member,
            "kind": self.kind,
            "incarnation": self.incarnation,
        }


class ActivityLog:
    """The newest membership events one observer saw, with refutations named."""

    def __init__(self, observer: str, capacity: int = ACTIVITY_MAX) -> None:
        if capacity < 1:
            raise ValueError("an activity log needs room for one event")
        self.observer = observer
        self._events: deque[Activity] = deque(maxlen=capacity)
        self._last: dict[str, tuple[str, int]] = {}

    def record(self, kind: str, member: str, incarnation: int, at: str) -> Activity:
        """Note one membership event; an alive after a suspicion becomes ``refuted``."""
        previous = self._last.get(member)
        shown = kind
        if kind == "alive" and previous is not None:
            was, old_incarnation = previous
            if was == "suspect" and incarnation > old_incarnation:
                shown = "refuted"
        self._last[member] = (kind, incarnation)
        event = Activity(at, self.observer, member, shown, incarnation)
        self._events.appendleft(event)
        return event

    def entries(self) -> list[dict[str, Any]]:
        """Newest first, JSON-ready."""
        return [e.as_dict() for e in self._events]
