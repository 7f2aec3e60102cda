"""The SWIM wire vocabulary: the messages one site sends another.

These frozen dataclasses are what the membership machine consumes and produces.
The codec (`grid.core.wire.codec`) maps each one to and from its Protocol Buffers
form; the machine itself never sees bytes. The vocabulary is deliberately small
and stable: add fields at the end with defaults, never rename or reorder.

Datagrams (UDP, at most 1,400 plaintext bytes):

- `Ping` probes a member directly; `PingReq` asks a helper to probe `target` on
  the sender's behalf; `Ack` answers a ping (or relays a helper's success);
  `Nack` is the Lifeguard helper's "I asked, the target did not answer";
  `Gossip` carries piggyback only (sent every gossip interval while news waits).
- Every datagram piggybacks `updates` (member gossip: `Alive`, `Suspect`,
  `Dead`) and `items` (opaque `BroadcastItem` state, one of four lanes).

Streams (TCP anti-entropy, no size budget): `PushPull` carries the sender's
whole member table and its newest broadcast item per (origin, lane).

Member identifiers are site names; addresses are ``"host:port"`` strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Lane(StrEnum):
    """The four independent invalidation lanes of broadcast state (seed 003).

    Their wire numbers are fixed in the proto. The CRDT snapshot
    (`grid.core.crdt.snapshot`) keys its lanes by this same enum.
    """

    STATE = "state"
    GATEWAY = "gateway"
    CERT = "cert"
    METADATA = "metadata"


@dataclass(frozen=True, slots=True)
class Alive:
    """`member` at `address` is alive at `incarnation` (also a refutation)."""

    member: str
    address: str
    incarnation: int


@dataclass(frozen=True, slots=True)
class Suspect:
    """`accuser` failed to reach `member` at `incarnation` and suspects it."""

    member: str
    address: str
    incarnation: int
    accuser: str


@dataclass(frozen=True, slots=True)
class Dead:
    """`member` is dead at `incarnation`; when `accuser == member` it left."""

    member: str
    address: str
    incarnation: int
    accuser: str

    @property
    def left(self) -> bool:
        """True for a graceful leave (the member declared itself gone)."""
        return self.accuser == self.member


MemberUpdate = Alive | Suspect | Dead
"""A piece of membership gossip about one member."""


@dataclass(frozen=True, slots=True)
class BroadcastItem:
    """An opaque piece of replicated state from `origin` in one `lane`.

    `revision` increases per (origin, lane); a newer revision supersedes an
    older one in the same origin and lane only. The machine never looks inside
    `payload`; the receiver merges it into its CRDT replica. `signature` is the
    origin's signature over the item (`grid.core.crdt.origin.signing_input`),
    empty when the origin signs nothing.
    """

    lane: Lane
    origin: str
    revision: int
    payload: bytes
    signature: bytes = b""


@dataclass(frozen=True, slots=True)
class Ping:
    """A direct probe; `target` names the intended member, if known."""

    seq: int
    source: str
    target: str | None = None
    updates: tuple[MemberUpdate, ...] = ()
    items: tuple[BroadcastItem, ...] = ()


@dataclass(frozen=True, slots=True)
class PingReq:
    """Ask the receiver to probe `target` at `target_address` for `source`."""

    seq: int
    source: str
    target: str
    target_address: str
    updates: tuple[MemberUpdate, ...] = ()
    items: tuple[BroadcastItem, ...] = ()


@dataclass(frozen=True, slots=True)
class Ack:
    """A probe answer for `seq`; `source` is the member shown to be alive."""

    seq: int
    source: str
    updates: tuple[MemberUpdate, ...] = ()
    items: tuple[BroadcastItem, ...] = ()


@dataclass(frozen=True, slots=True)
class Nack:
    """A ping-req helper (`source`) could not reach the target for `seq`."""

    seq: int
    source: str
    updates: tuple[MemberUpdate, ...] = ()
    items: tuple[BroadcastItem, ...] = ()


@dataclass(frozen=True, slots=True)
class Gossip:
    """A piggyback-only datagram from `source`: queued gossip and items, no probe.

    Sent every gossip interval to a few random members while the sender's
    queue holds news (memberlist's gossip), so news does not wait for probes.
    """

    source: str
    updates: tuple[MemberUpdate, ...] = ()
    items: tuple[BroadcastItem, ...] = ()


Datagram = Ping | PingReq | Ack | Nack | Gossip
"""Every message carried in one UDP datagram."""


@dataclass(frozen=True, slots=True)
class PushPull:
    """Anti-entropy state exchanged over TCP: member table and items.

    In a request, `members` holds one update per known member (its current
    state, including tombstones of dead and left members, and the sender
    itself). A reply leaves out what the request held already
    (`grid.core.swim.anti_entropy`), unless `join` is true: the sender is joining
    and wants the receiver's full state back.
    """

    source: str
    members: tuple[MemberUpdate, ...]
    items: tuple[BroadcastItem, ...]
    join: bool = False
