"""A deterministic simulator of a SWIM mesh: many machines, one process, virtual time.

The simulator plays the adapter for every `SwimMachine`: it carries out their
effects on a `FakeClock` and a `FakeNetwork`. Datagrams cross the lossy
network; push-pull exchanges cross it as reliable streams (request, then reply,
each after one delay), and fail like a refused connection when the peer is
down or partitioned away. Everything random (network and every machine's own
`random.Random`) derives from one seed, so a failing run replays exactly from
the seed it prints.

A node may own a CRDT replica (`Simulator.attach_replica`): its machine then
admits received items through the replica and local writes are published
through `grid.core.crdt.sync`, the same glue the socket runtime uses.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import assert_never

from grid.core.crdt import sync
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import GridStateSnapshot
from grid.core.swim.config import SwimConfig
from grid.core.swim.dissemination import SizeEstimator, estimate_size
from grid.core.swim.effects import (
    Deliver,
    Effect,
    EventKind,
    Notify,
    PushPullRequest,
    Schedule,
    Send,
    Timer,
)
from grid.core.swim.machine import SwimMachine
from grid.core.swim.members import Member, MemberState
from grid.core.swim.messages import BroadcastItem, Datagram, PushPull
from grid.testing.clock import FakeClock
from grid.testing.network import FakeNetwork, NetworkConditions

DeliverHook = Callable[["SimNode", BroadcastItem], None]


@dataclass(frozen=True, slots=True)
class Observation:
    """A membership event one node reported about another, at a virtual time."""

    at: float
    observer: str
    kind: EventKind
    member: str
    incarnation: int


@dataclass(slots=True)
class SimNode:
    """One simulated member: its machine, whether it runs, and what it saw."""

    id: str
    address: str
    machine: SwimMachine
    up: bool = False
    generation: int = 0
    delivered: list[BroadcastItem] = field(default_factory=list)
    on_deliver: DeliverHook | None = None
    replica: GridState | None = None

    def state_of(self, member_id: str) -> MemberState | None:
        """This node's view of `member_id` (None when unknown)."""
        member = self.machine.member(member_id)
        return None if member is None else member.state


class Simulator:
    """N machines on a fake clock and a fake network, driven by one seed."""

    def __init__(
        self,
        seed: int,
        *,
        config: SwimConfig | None = None,
        conditions: NetworkConditions | None = None,
        size_of: SizeEstimator = estimate_size,
        record_alive: bool = False,
    ) -> None:
        self.seed = seed
        self.record_alive = record_alive
        self.alive_events = 0
        self.rng = random.Random(seed)
        self.config = config or SwimConfig()
        self.size_of = size_of
        self.clock = FakeClock()
        self.network = FakeNetwork(self.clock, self.rng, conditions)
        self.nodes: dict[str, SimNode] = {}
        self._by_address: dict[str, SimNode] = {}
        self.observations: list[Observation] = []
        """Suspect, dead and left events (alive too when `record_alive`)."""

    def __repr__(self) -> str:
        return f"Simulator(seed={self.seed}, t={self.clock.now:.3f}, nodes={len(self.nodes)})"

    @property
    def now(self) -> float:
        """Current virtual time, seconds."""
        return self.clock.now

    # -- membership of the simulation -------------------------------------

    def add_node(
        self,
        node_id: str | None = None,
        *,
        incarnation: int = 0,
        on_deliver: DeliverHook | None = None,
    ) -> SimNode:
        """Create a (not yet joined) node with a deterministic address."""
        index = len(self.nodes)
        node_id = node_id or f"site-{index:04d}"
        address = f"10.{index // 250}.{index % 250}.1:7946"
        node = SimNode(node_id, address, self._machine(node_id, address, incarnation))
        node.on_deliver = on_deliver
        self.nodes[node_id] = node
        self._by_address[address] = node
        return node

    def _machine(
        self, node_id: str, address: str, incarnation: int, replica: GridState | None = None
    ) -> SwimMachine:
        return SwimMachine(
            node_id,
            address,
            rng=random.Random(self.rng.getrandbits(64)),
            config=self.config,
            size_of=self.size_of,
            incarnation=incarnation,
            admit=None if replica is None else sync.admission(replica),
        )

    def bootstrap(self, nodes: Iterable[SimNode]) -> None:
        """Start `nodes` already knowing each other (as if restored from state)."""
        nodes = list(nodes)
        table = {
            n.id: Member(n.id, n.address, n.machine.incarnation, MemberState.ALIVE) for n in nodes
        }
        for node in nodes:
            node.machine.restore(table)
            self.join(node, ())

    def join(self, node: SimNode, seeds: Iterable[str | SimNode]) -> None:
        """Bring `node` up and join through `seeds` (nodes or addresses)."""
        addresses = [s.address if isinstance(s, SimNode) else s for s in seeds]
        self._up(node)
        self.apply(node, node.machine.join(addresses, self.clock.now))

    def _up(self, node: SimNode) -> None:
        if not node.up:
            node.up = True
            self.network.attach(node.address, self._receiver(node))

    def _receiver(self, node: SimNode) -> Callable[[str, Datagram], None]:
        def receive(src: str, message: Datagram) -> None:
            if node.up:
                self.apply(node, node.machine.handle_packet(src, message, self.clock.now))

        return receive

    def kill(self, node: SimNode) -> None:
        """Crash `node`: it stops answering and its timers stop firing."""
        node.up = False
        node.generation += 1
        self.network.detach(node.address)

    def leave(self, node: SimNode) -> None:
        """Leave gracefully, then stop the node."""
        self.apply(node, node.machine.leave(self.clock.now))
        self.kill(node)

    def restart(
        self,
        node: SimNode,
        seeds: Iterable[str | SimNode],
        *,
        replica: GridState | None = None,
    ) -> None:
        """Restart a crashed node from scratch (incarnation 0) and rejoin.

        A node with a replica comes back with ``replica`` (a new process's
        empty one, say), or keeps the one it had.
        """
        if node.up:
            self.kill(node)
        if replica is not None:
            node.replica = replica
        node.machine = self._machine(node.id, node.address, 0, node.replica)
        self.join(node, seeds)

    # -- effects -----------------------------------------------------------

    def apply(self, node: SimNode, effects: list[Effect]) -> None:
        """Carry out a machine's effects, as the real adapter would."""
        clock = self.clock
        for effect in effects:
            match effect:
                case Send(address=address, message=message):
                    self.network.send(node.address, address, message)
                case Schedule(timer=timer, at=at):
                    clock.call_at(at, self._fire, node, node.generation, timer)
                case Notify(kind=kind, member=member, incarnation=incarnation):
                    if kind is EventKind.ALIVE and not self.record_alive:
                        self.alive_events += 1
                        continue
                    self.observations.append(
                        Observation(clock.now, node.id, kind, member, incarnation)
                    )
                case Deliver(item=item):
                    node.delivered.append(item)
                    if node.on_deliver is not None:
                        node.on_deliver(node, item)
                case PushPullRequest():
                    self._push_pull(node, effect)
                case _:
                    assert_never(effect)

    # -- replicas ------------------------------------------------------------

    def attach_replica(self, node: SimNode, replica: GridState | None = None) -> GridState:
        """Give `node` a CRDT replica (default: a fresh one, origin = its id).

        Call it before the node joins: its machine is rebuilt to admit
        received items through the replica.
        """
        if node.up:
            raise ValueError("attach a replica before the node joins")
        node.replica = replica or GridState(node.id)
        node.machine = self._machine(node.id, node.address, node.machine.incarnation, node.replica)
        return node.replica

    def publish_snapshot(self, node: SimNode, snapshot: GridStateSnapshot) -> int:
        """A local write at `node`: install `snapshot` and publish the lanes that moved."""
        return self.write_local(node, lambda _current: snapshot)

    def write_local(self, node: SimNode, change: sync.Change) -> int:
        """A local write at `node`: apply ``change`` to its snapshot, publish what moved."""
        if node.replica is None:
            raise ValueError(f"{node.id} has no replica")
        count, effects = sync.write_local(node.replica, node.machine, change, self.now)
        self.apply(node, effects)
        return count

    def _fire(self, node: SimNode, generation: int, timer: Timer) -> None:
        if node.up and node.generation == generation:
            self.apply(node, node.machine.handle_timer(timer, self.clock.now))

    def _push_pull(self, node: SimNode, request: PushPullRequest) -> None:
        peer = self._by_address.get(request.address)
        generation = node.generation

        def at_peer() -> None:
            if peer is None or not peer.up:
                return
            reply, effects = peer.machine.handle_push_pull(request.message, self.clock.now)
            self.apply(peer, effects)
            self.network.stream(peer.address, node.address, lambda: at_origin(reply))

        def at_origin(reply: PushPull) -> None:
            if node.up and node.generation == generation:
                self.apply(node, node.machine.handle_push_pull_reply(reply, self.clock.now))

        self.network.stream(node.address, request.address, at_peer)

    # -- running -----------------------------------------------------------

    def run_for(self, seconds: float) -> None:
        """Advance virtual time by `seconds`."""
        self.clock.run_for(seconds)

    def run_until(
        self, condition: Callable[[], bool], *, timeout_s: float, check_every_s: float = 1.0
    ) -> float | None:
        """Run until `condition()` holds (checked every `check_every_s`).

        Returns the virtual time at which it first held, or None on timeout.
        """
        deadline = self.clock.now + timeout_s
        while True:
            if condition():
                return self.clock.now
            if self.clock.now >= deadline:
                return None
            self.clock.run_until(min(deadline, self.clock.now + check_every_s))

    # -- views for assertions ----------------------------------------------

    def running(self) -> list[SimNode]:
        """Nodes currently up."""
        return [node for node in self.nodes.values() if node.up]

    def sees_alive(self, observer: SimNode, member: SimNode) -> bool:
        """Whether `observer` holds `member` alive."""
        return observer.state_of(member.id) is MemberState.ALIVE

    def full_membership(
        self, nodes: Iterable[SimNode] | None = None, *, suspect_ok: bool = False
    ) -> bool:
        """Every node in `nodes` (default: running) holds all the others alive.

        With `suspect_ok`, a member held suspect also counts: under packet loss
        some member is nearly always under (soon refuted) suspicion somewhere.
        """
        group = list(self.running() if nodes is None else nodes)
        if any(observer.machine.live_count < len(group) - 1 for observer in group):
            return False
        if not suspect_ok and any(observer.machine.suspect_count for observer in group):
            return False
        ids = {node.id for node in group}
        for observer in group:
            if suspect_ok:
                held = {m.id for m in observer.machine.members() if m.live}
            else:
                held = {m.id for m in observer.machine.members() if m.state is MemberState.ALIVE}
            held.add(observer.id)
            if not ids <= held:
                return False
        return True

    def deaths(self, member: str | None = None) -> list[Observation]:
        """Dead (failed, not left) observations, optionally about one member."""
        return [
            o
            for o in self.observations
            if o.kind is EventKind.DEAD and (member is None or o.member == member)
        ]
