"""The SWIM probe cycle with Lifeguard's refinements: ping, ping-req, nack, suspect.

`Prober` holds the one probe in flight and the ping-reqs we relay as a helper.
`SwimMachine` drives it from its timers and datagrams; it sends through the
machine's piggybacking ``send`` and numbers messages with the machine's
sequence, so every datagram still carries gossip.

Per probe round of `probe_interval_s · (LHM + 1)`:

1. ping the next member of a random permutation (a suspect one is told it is
   suspected: Lifeguard's buddy system);
2. after `probe_timeout_s · (LHM + 1)` without an ack, ask `gossip_nodes`
   random members to ping-req it; helpers nack when they got no answer;
3. at the end of the round, if no ack came, the member is suspected. The LHM
   rises by the number of missing nacks (or by one without helpers); an acked
   direct probe lowers it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import Effect, ProbeTimeout, RelayTimeout, Schedule, Send
from grid.core.swim.members import MemberState
from grid.core.swim.membership import Membership
from grid.core.swim.messages import Ack, Datagram, MemberUpdate, Nack, Ping, PingReq, Suspect


class SendFn(Protocol):
    """The machine's datagram builder: `message` to `address`, `lead` updates first."""

    def __call__(
        self, address: str, message: Datagram, lead: tuple[MemberUpdate, ...] = ()
    ) -> Send: ...


@dataclass(slots=True)
class _Probe:
    seq: int
    target: str
    incarnation: int
    acked: bool = False
    indirect: bool = False
    expected_nacks: int = 0
    nacks: int = 0


@dataclass(frozen=True, slots=True)
class _Relay:
    origin_seq: int
    requester: str
    target: str


class Prober:
    """One member's probe in flight and the probes it relays for others."""

    def __init__(
        self,
        node_id: str,
        config: SwimConfig,
        rng: random.Random,
        view: Membership,
        send: SendFn,
        next_seq: Callable[[], int],
    ) -> None:
        self._node_id = node_id
        self._config = config
        self._rng = rng
        self._view = view
        self._members = view.table
        self._send = send
        self._next_seq = next_seq
        self._probe: _Probe | None = None
        self._relays: dict[int, _Relay] = {}

    def clear(self) -> None:
        """Forget the probe in flight and every relay (we left)."""
        self._probe = None
        self._relays.clear()

    def probe_next(
        self, now: float, out: list[Effect], introduction: Callable[[str], tuple[MemberUpdate, ...]]
    ) -> None:
        """Ping the next member of the permutation and schedule its ack deadline."""
        target = self._members.next_probe_target(self._rng)
        if target is None:
            return
        seq = self._next_seq()
        self._probe = _Probe(seq, target.id, target.incarnation)
        lead: tuple[MemberUpdate, ...] = ()
        if target.state is MemberState.SUSPECT:
            lead = (target.as_update(),)  # the buddy system
        lead += introduction(target.id)
        out.append(self._send(target.address, Ping(seq, self._node_id, target.id), lead))
        timeout_at = now + self._view.health.scale(self._config.probe_timeout_s)
        out.append(Schedule(ProbeTimeout(seq), timeout_at))

    def on_ack(self, ack: Ack, out: list[Effect]) -> None:
        """An ack for our probe, or for one we relay (passed back to the requester)."""
        probe = self._probe
        if probe is not None and probe.seq == ack.seq:
            if not probe.acked:
                probe.acked = True
                if not probe.indirect:
                    self._view.health.apply(-1)
            return
        relay = self._relays.pop(ack.seq, None)
        if relay is not None:
            out.append(self._send(relay.requester, Ack(relay.origin_seq, relay.target)))

    def on_nack(self, nack: Nack) -> None:
        """A helper could not reach our probe's target either."""
        probe = self._probe
        if probe is not None and probe.seq == nack.seq:
            probe.nacks += 1

    def relay(self, src_address: str, req: PingReq, now: float, out: list[Effect]) -> None:
        """As a helper, probe `req.target` for the requester; nack if it stays silent."""
        if req.target == self._node_id:
            # Asked to probe ourselves (the requester's view of our address is
            # stale or shared): we are the answer.
            out.append(self._send(src_address, Ack(req.seq, self._node_id)))
            return
        seq = self._next_seq()
        self._relays[seq] = _Relay(req.seq, src_address, req.target)
        out.append(self._send(req.target_address, Ping(seq, self._node_id, req.target)))
        nack_at = now + self._config.probe_timeout_s * self._config.nack_timeout_fraction
        out.append(Schedule(RelayTimeout(seq), nack_at))

    def on_probe_timeout(self, timer: ProbeTimeout) -> list[Effect]:
        """No ack for the direct probe in time: ask helpers to ping-req the target."""
        probe = self._probe
        if probe is None or probe.seq != timer.seq or probe.acked:
            return []
        probe.indirect = True
        target = self._members.get(probe.target)
        if target is None or not target.live:
            return []
        helpers = self._members.random_live(self._rng, self._config.gossip_nodes, target.id)
        probe.expected_nacks = len(helpers)
        req = PingReq(probe.seq, self._node_id, target.id, target.address)
        return [self._send(helper.address, req) for helper in helpers]

    def on_relay_timeout(self, timer: RelayTimeout) -> list[Effect]:
        """The probe we relay went unanswered: tell the requester with a nack."""
        relay = self._relays.pop(timer.seq, None)
        if relay is None:
            return []
        return [self._send(relay.requester, Nack(relay.origin_seq, self._node_id))]

    def conclude(self, now: float, out: list[Effect]) -> None:
        """End the round: an unacked probe makes its target suspect."""
        probe, self._probe = self._probe, None
        if probe is None or probe.acked:
            return
        # Lifeguard: helpers that failed to nack suggest the problem is ours.
        health = self._view.health
        if probe.expected_nacks > 0:
            health.apply(max(0, probe.expected_nacks - probe.nacks))
        else:
            health.apply(1)
        target = self._members.get(probe.target)
        if target is None or not target.live:
            return
        accusation = Suspect(target.id, target.address, probe.incarnation, self._node_id)
        self._view.apply(accusation, now, out, gossip=True)
