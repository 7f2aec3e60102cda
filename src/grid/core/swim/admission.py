"""Members are admitted, not announced: what an announced member must prove to count.

Anyone holding the SWIM key can seal an `Alive` for any name at any address.
Believed as it stands, one flood of them fills the member table, spreads to
every member, and aims the mesh's probes at the address it names (a reflector).
So a member first heard of through gossip, or at a new address, only counts
(is probed, gossiped on, can accuse, is listed in push-pull) once it proves
itself in one of three ways:

- **a direct answer**: we send a challenge (a `Ping` naming the member, with an
  unpredictable sequence number, carrying nothing but our own `Alive`) to the
  address it claims, and an
  `Ack` for that sequence comes back from that member. Only someone at that
  address sees the sequence number;
- **the verifier's word** (`MemberVouch`, injected): the operator vouches for
  a name that a certificate issued by the grid CA names, verified on the cert
  lane (`grid.core.crdt.sync.vouch`). It admits a new name only: a known
  member moving to another address must still answer there;
- **a trusted source**: the reply of a configured seed to our own push-pull
  (whose table, by the same rules, holds only admitted members), and a table
  restored before joining.

Until then an announced member waits among the `Applicants`: one per address,
at most `unproven_max`, each challenged at most `proof_attempts` times, all
challenges drawn from one token bucket (`unproven_probe_rate_per_s`, burst
`unproven_probe_burst`). An address that never answered is left alone for
`unproven_retry_s`. A flood therefore costs each member it reaches a few
bounded challenges, not a table entry, and nothing spreads.

An answer that comes late still proves the member: every challenge sent to an
applicant stays answerable while it waits and, once it was dropped, while its
address cools. On saturated cores acks arrive after the timeout; before, each
such member was dropped and its address cooled for the full `unproven_retry_s`,
and a mass join on two cores waited on push-pull for 92 to 112 s. A late answer
sends nothing more and holds nothing beyond the cooling address it belongs to.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import Effect, ProofTick, ProofTimeout, Schedule, Send
from grid.core.swim.messages import Ack, Alive, Ping

MemberVouch = Callable[[Alive], bool]
"""The owner's word on an announced member it has not met: True admits it at once
(a verified grid-CA certificate names it). Without one, every newcomer proves itself
by answering a challenge."""

REFUSAL_REASONS = ("table_full", "unproven_full", "address_taken", "cooling_down")
"""Why an announced member was refused: the closed label set of
``grid_swim_members_refused_total``. ``table_full``: the member table is at
`member_table_max` with no tombstone to give way; ``unproven_full``: `unproven_max`
members already wait; ``address_taken``: another name waits at that address;
``cooling_down``: the address left its challenges unanswered lately."""

ADMISSION_ROUTES = ("answered", "vouched")
"""How an announced member was admitted (``grid_swim_members_admitted_total``)."""

TOKEN_TOLERANCE = 1e-9
"""A token this close to whole counts as whole (clock rounding)."""


def _refusals() -> dict[str, int]:
    return dict.fromkeys(REFUSAL_REASONS, 0)


@dataclass(slots=True)
class AdmissionCounters:
    """What member admission did, in plain integers read at scrape time."""

    answered: int = 0
    """Members admitted on a direct answer to a challenge."""
    answered_late: int = 0
    """Of those, admitted on an answer that came after their challenge timed out."""
    vouched: int = 0
    """Members admitted on the verifier's word."""
    unanswered: int = 0
    """Announced members dropped after every challenge went unanswered."""
    challenges: int = 0
    """Challenge datagrams sent to addresses of unproven members."""
    refused: dict[str, int] = field(default_factory=_refusals)
    """Announced members refused, per reason of `REFUSAL_REASONS`."""


@dataclass(slots=True)
class _Applicant:
    member: str
    address: str
    incarnation: int
    attempts: int = 0
    seq: int | None = None
    """The challenge in flight, if any."""
    sent: list[int] = field(default_factory=list)
    """Every challenge sent to it: an answer to any of them proves it."""


class Applicants:
    """Announced members waiting to prove themselves, and the challenges sent to them."""

    __slots__ = (
        "_by_address",
        "_by_seq",
        "_config",
        "_cooling",
        "_late",
        "_me",
        "_refilled_at",
        "_rng",
        "_tick_armed",
        "_tokens",
        "_waiting",
        "counters",
    )

    def __init__(
        self,
        me: Callable[[], Alive],
        config: SwimConfig,
        rng: random.Random,
        counters: AdmissionCounters,
    ) -> None:
        self._me = me
        self._config = config
        self._rng = rng
        self.counters = counters
        self._by_address: dict[str, _Applicant] = {}
        self._by_seq: dict[int, str] = {}
        self._waiting: deque[str] = deque()
        self._cooling: dict[str, float] = {}
        self._late: dict[str, _Applicant] = {}
        """Applicants dropped unanswered, by address, while their address cools."""
        self._tokens = float(config.unproven_probe_burst)
        self._refilled_at: float | None = None
        self._tick_armed = False

    def __len__(self) -> int:
        return len(self._by_address)

    def clear(self) -> None:
        """Forget every applicant and challenge (we left); the budget stays spent."""
        self._by_address.clear()
        self._by_seq.clear()
        self._late.clear()
        self._waiting.clear()
        self._tick_armed = False

    def consider(self, alive: Alive, now: float, out: list[Effect]) -> None:
        """Hold an announced member until it proves itself; challenge it if the budget allows."""
        address = alive.address
        held = self._by_address.get(address)
        if held is not None:
            if held.member == alive.member:
                held.incarnation = max(held.incarnation, alive.incarnation)
            else:
                self.counters.refused["address_taken"] += 1
            return
        if self._cooling_down(address, now):
            self.counters.refused["cooling_down"] += 1
            return
        if len(self._by_address) >= self._config.unproven_max:
            self.counters.refused["unproven_full"] += 1
            return
        self._by_address[address] = _Applicant(alive.member, address, alive.incarnation)
        self._waiting.append(address)
        self.pump(now, out)

    def on_ack(self, ack: Ack) -> Alive | None:
        """The announcement an ack proves (its member answered a challenge of ours), or None."""
        address = self._by_seq.get(ack.seq)
        if address is None:
            return None
        applicant = self._by_address.get(address)
        late = applicant is None
        if late:
            applicant = self._late.get(address)
        if applicant is None or ack.seq not in applicant.sent or applicant.member != ack.source:
            return None
        self._forget(applicant)
        if late:
            del self._late[address]
            self._cooling.pop(address, None)
            self.counters.answered_late += 1
        else:
            del self._by_address[address]
        self.counters.answered += 1
        return Alive(applicant.member, applicant.address, applicant.incarnation)

    def owns(self, seq: int) -> bool:
        """Whether `seq` numbers a challenge of ours (its ack is no probe's)."""
        return seq in self._by_seq

    def on_timeout(self, timer: ProofTimeout, now: float) -> list[Effect]:
        """A challenge went unanswered: try again, or drop the applicant and cool its address.

        Its challenges stay answerable (`on_ack`) until the address has cooled."""
        out: list[Effect] = []
        address = self._by_seq.get(timer.seq)
        applicant = None if address is None else self._by_address.get(address)
        if applicant is None or applicant.seq != timer.seq:
            return out
        applicant.seq = None
        if applicant.attempts < self._config.proof_attempts:
            self._waiting.append(applicant.address)
            self.pump(now, out)
            return out
        del self._by_address[applicant.address]
        self.counters.unanswered += 1
        self._cool(applicant, now)
        return out

    def on_tick(self, now: float) -> list[Effect]:
        """The budget refilled: challenge who waits."""
        self._tick_armed = False
        out: list[Effect] = []
        self.pump(now, out)
        return out

    def pump(self, now: float, out: list[Effect]) -> None:
        """Challenge waiting applicants while tokens last; arm one tick for the rest."""
        self._refill(now)
        waiting = self._waiting
        while waiting and self._tokens >= 1 - TOKEN_TOLERANCE:
            applicant = self._by_address.get(waiting.popleft())
            if applicant is None or applicant.seq is not None:
                continue
            self._tokens -= 1
            self._challenge(applicant, now, out)
        if waiting and not self._tick_armed:
            self._tick_armed = True
            rate = self._config.unproven_probe_rate_per_s
            out.append(Schedule(ProofTick(), now + (1 - self._tokens) / rate))

    def _refill(self, now: float) -> None:
        cfg = self._config
        if self._refilled_at is not None:
            gained = (now - self._refilled_at) * cfg.unproven_probe_rate_per_s
            self._tokens = min(float(cfg.unproven_probe_burst), self._tokens + gained)
        self._refilled_at = now

    def _challenge(self, applicant: _Applicant, now: float, out: list[Effect]) -> None:
        seq = self._rng.getrandbits(64)
        while seq in self._by_seq:
            seq = self._rng.getrandbits(64)
        applicant.seq = seq
        applicant.sent.append(seq)
        applicant.attempts += 1
        self._by_seq[seq] = applicant.address
        self.counters.challenges += 1
        # No piggyback rides to an address nobody vouched for, only our own Alive:
        # the challenged member learns of us at once, and challenges us in turn.
        me = self._me()
        ping = Ping(seq, me.member, applicant.member, updates=(me,))
        out.append(Send(applicant.address, ping))
        out.append(Schedule(ProofTimeout(seq), now + self._config.probe_timeout_s))

    def _cooling_down(self, address: str, now: float) -> bool:
        cooling = self._cooling
        while cooling:
            first = next(iter(cooling))
            if cooling[first] > now:
                break
            self._uncool(first)  # expired, in order: every address cools as long
        return address in cooling

    def _cool(self, applicant: _Applicant, now: float) -> None:
        cooling = self._cooling
        address = applicant.address
        self._uncool(address)
        if len(cooling) >= max(1, self._config.unproven_max):
            self._uncool(next(iter(cooling)))
        cooling[address] = now + self._config.unproven_retry_s
        self._late[address] = applicant

    def _uncool(self, address: str) -> None:
        """The address cools no longer: a late answer from it proves nothing now."""
        self._cooling.pop(address, None)
        late = self._late.pop(address, None)
        if late is not None:
            self._forget(late)

    def _forget(self, applicant: _Applicant) -> None:
        """Its challenges are answered or given up: their numbers are no longer ours."""
        for seq in applicant.sent:
            if self._by_seq.get(seq) == applicant.address:
                del self._by_seq[seq]
