"""What the membership machine asks its adapter to do, and the timers it sets.

The machine never performs I/O. Every input returns a list of effects, which
`grid.core.swim.runtime.carry_out` hands, in order, to the runtime's verbs:

- `Send(address, message)`: send one datagram (UDP) to ``"host:port"``.
- `Schedule(timer, at)`: call `handle_timer(timer, now)` at time `at` (same
  clock as the `now` passed in). Timers are never cancelled: a timer that no
  longer matters is recognised and ignored by the machine, so the adapter needs
  no handles, only one scheduler. Firing late is safe; firing early is not.
- `Notify(kind, member, address, incarnation)`: a membership event for the
  owner (the operator's controllers): alive, suspect, dead or left.
- `Deliver(item)`: a broadcast item newer than any seen for its (origin, lane);
  with an admission verdict (`SwimMachine(admit=...)`) it was already merged
  into the owner's CRDT replica, so this only says that something changed.
- `PushPullRequest(address, message)`: open a TCP anti-entropy exchange with
  ``address``: send `message`, read the peer's `PushPull` reply and pass it to
  `Driver.push_pull_reply` (the machine's `handle_push_pull_reply`). A failed
  exchange needs no report.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from grid.core.swim.messages import BroadcastItem, Datagram, PushPull


class EventKind(StrEnum):
    """The membership events the owner is told about."""

    ALIVE = "alive"
    SUSPECT = "suspect"
    DEAD = "dead"
    LEFT = "left"


@dataclass(frozen=True, slots=True)
class ProbeTick:
    """Start the next probe round (and conclude the previous one)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class ProbeTimeout:
    """The direct probe `seq` got no ack in time: ask helpers (ping-req)."""

    seq: int


@dataclass(frozen=True, slots=True)
class RelayTimeout:
    """As a ping-req helper, the probe `seq` went unanswered: send a nack."""

    seq: int


@dataclass(frozen=True, slots=True)
class SuspicionTimeout:
    """The suspicion of `member` at `incarnation` may have expired."""

    member: str
    incarnation: int


@dataclass(frozen=True, slots=True)
class PushPullTick:
    """Time for periodic anti-entropy with a random live member."""

    epoch: int


@dataclass(frozen=True, slots=True)
class OversizeTick:
    """Time for a push-pull round that spreads items too large for a datagram."""

    epoch: int


@dataclass(frozen=True, slots=True)
class GossipTick:
    """Time to send queued gossip to a few random members (when any is queued)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class ProofTimeout:
    """The challenge `seq` to an unproven member went unanswered in time."""

    seq: int


@dataclass(frozen=True, slots=True)
class ProofTick:
    """The challenge budget has a token again for an unproven member that waits.

    It carries no epoch: a stale one only makes the waiting applicants' turn come early
    if tokens allow, which they check themselves."""


Timer = (
    ProbeTick
    | ProbeTimeout
    | RelayTimeout
    | SuspicionTimeout
    | PushPullTick
    | OversizeTick
    | GossipTick
    | ProofTimeout
    | ProofTick
)
"""Every timer the machine schedules."""


@dataclass(frozen=True, slots=True)
class Send:
    """Send `message` as one datagram to `address`."""

    address: str
    message: Datagram


@dataclass(frozen=True, slots=True)
class Schedule:
    """Call `handle_timer(timer, now)` at `at`."""

    timer: Timer
    at: float


@dataclass(frozen=True, slots=True)
class Notify:
    """A membership event for the owner."""

    kind: EventKind
    member: str
    address: str
    incarnation: int


@dataclass(frozen=True, slots=True)
class Deliver:
    """A newly learned broadcast item for the owner to merge."""

    item: BroadcastItem


@dataclass(frozen=True, slots=True)
class PushPullRequest:
    """Exchange `message` with the member at `address` over TCP."""

    address: str
    message: PushPull


Effect = Send | Schedule | Notify | Deliver | PushPullRequest
"""Everything the machine asks of its adapter."""
