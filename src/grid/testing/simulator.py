"""A deterministic simulator of a SWIM mesh: many machines, one process, virtual time.

The simulator is the `Runtime` of every `SwimMachine`: each machine is fed by
the core's `grid.core.swim.runtime.Driver`, the very driver `SwimNode` runs in
production, and its effects come out on a `FakeClock` and a `FakeNetwork`.
Datagrams cross the lossy network; push-pull exchanges cross it as reliable
streams (request, then reply, each after one delay), and fail like a refused
connection when the peer is down or partitioned away. Datagrams are sized with
the codec's exact `encoded_size`, as in production. Everything random (network
and every machine's own `random.Random`) derives from one seed, so a failing
run replays exactly from the seed it prints.

With ``sealed=True`` the network carries real bytes: every datagram and
push-pull message is encoded with the codec and sealed in a GRID frame under
the simulation's keyring, and opened and decoded on receipt
(`grid.core.wire.sealed`, the functions the sockets use), so a simulation
also exercises the wire path. Frame nonces come from the OS, but nothing in a
run depends on the ciphertext, so a seed still replays exactly.

A node may own a CRDT replica (`Simulator.attach_replica`): its machine then
admits received items through the replica and local writes are published
through `grid.core.crdt.sync`, the same glue the socket runtime uses.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from grid.adapters.udp import TransportCounters
from grid.core.crdt import sync
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import GridStateSnapshot
from grid.core.swim.admission import MemberVouch
from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import Deliver, Effect, EventKind, Notify, Timer
from grid.core.swim.machine import SwimMachine
from grid.core.swim.members import Member, MemberState
from grid.core.swim.messages import BroadcastItem, Datagram, PushPull
from grid.core.swim.runtime import Driver, Event, carry_out
from grid.core.wire.codec import DEFAULT_LIMITS, CodecError, DatagramTooLarge, encoded_size
from grid.core.wire.keyring import Keyring
from grid.core.wire.sealed import open_datagram, open_stream, seal_datagram, seal_stream
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
    """One simulated member: its machine and driver, whether it runs, and what it saw."""

    id: str
    address: str
    machine: SwimMachine
    up: bool = False
    generation: int = 0
    delivered: list[BroadcastItem] = field(default_factory=list)
    on_deliver: DeliverHook | None = None
    replica: GridState | None = None
    driver: Driver = field(init=False, repr=False)
    """Feeds `machine` its inputs through this node's runtime (set by the simulator)."""

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
        record_alive: bool = False,
        sealed: bool = False,
        vouch: MemberVouch | None = None,
    ) -> None:
        self.seed = seed
        self.record_alive = record_alive
        self.alive_events = 0
        self.rng = random.Random(seed)
        self.config = config or SwimConfig()
        self.vouch = vouch
        """Every machine's verifier of announced members (a stand-in for the grid CA)."""
        # The key draws from its own generator, so sealing leaves the run's draws alone.
        key = random.Random(f"swim-key-{seed}").randbytes(32)
        self.keyring = Keyring(key) if sealed else None
        """The mesh's key when the network carries sealed bytes (`sealed=True`)."""
        self.wire = TransportCounters()
        """What the sealed network carried and dropped, as a node's transport counts it."""
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
        machine = self._machine(node_id, address, incarnation)
        node = SimNode(node_id, address, machine, on_deliver=on_deliver)
        node.driver = Driver(machine, _SimRuntime(self, node))
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
            size_of=encoded_size,
            incarnation=incarnation,
            admit=None if replica is None else sync.admission(replica),
            vouch=self.vouch,
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
        node.driver.run(lambda machine, now: (None, machine.join(addresses, now)), self.clock.now)

    def _up(self, node: SimNode) -> None:
        if not node.up:
            node.up = True
            self.network.attach(node.address, self._receiver(node))

    def _receiver(self, node: SimNode) -> Callable[[str, Any], None]:
        def receive(src: str, carried: Datagram | bytes) -> None:
            if not node.up:
                return
            message = self._open_datagram(carried) if isinstance(carried, bytes) else carried
            if message is not None:
                node.driver.packet(src, message, self.clock.now)

        return receive

    def _open_datagram(self, packet: bytes) -> Datagram | None:
        assert self.keyring is not None
        try:
            return open_datagram(packet, self.keyring, self.wire.datagram_frames)
        except CodecError:
            self.wire.datagram_drops["malformed"] += 1
            return None

    def kill(self, node: SimNode) -> None:
        """Crash `node`: it stops answering and its timers stop firing."""
        node.up = False
        node.generation += 1
        self.network.detach(node.address)

    def leave(self, node: SimNode) -> None:
        """Leave gracefully, then stop the node."""
        node.driver.run(lambda machine, now: (None, machine.leave(now)), self.clock.now)
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
        self._install(node, self._machine(node.id, node.address, 0, node.replica))
        self.join(node, seeds)

    def _install(self, node: SimNode, machine: SwimMachine) -> None:
        node.machine = machine
        node.driver = Driver(machine, node.driver.runtime)

    # -- effects -----------------------------------------------------------

    def apply(self, node: SimNode, effects: list[Effect]) -> None:
        """Carry out a machine's effects through the node's runtime (`carry_out`)."""
        carry_out(effects, node.driver.runtime)

    # -- replicas ------------------------------------------------------------

    def attach_replica(self, node: SimNode, replica: GridState | None = None) -> GridState:
        """Give `node` a CRDT replica (default: a fresh one, origin = its id).

        Call it before the node joins: its machine is rebuilt to admit
        received items through the replica.
        """
        if node.up:
            raise ValueError("attach a replica before the node joins")
        node.replica = replica or GridState(node.id)
        machine = self._machine(node.id, node.address, node.machine.incarnation, node.replica)
        self._install(node, machine)
        return node.replica

    def publish_snapshot(self, node: SimNode, snapshot: GridStateSnapshot) -> int:
        """A local write at `node`: install `snapshot` and publish the lanes that moved."""
        return self.write_local(node, lambda _current: snapshot)

    def write_local(self, node: SimNode, change: sync.Change) -> int:
        """A local write at `node`: apply ``change`` to its snapshot, publish what moved."""
        if node.replica is None:
            raise ValueError(f"{node.id} has no replica")
        replica = node.replica
        count: int = node.driver.run(
            lambda machine, now: sync.write_local(replica, machine, change, now), self.now
        )
        return count

    def _fire(self, node: SimNode, generation: int, timer: Timer) -> None:
        if node.up and node.generation == generation:
            node.driver.timer(timer, self.clock.now)

    def _push_pull(self, node: SimNode, address: str, message: PushPull) -> None:
        """One exchange: the request crosses, the peer answers, the reply crosses back."""
        peer = self._by_address.get(address)
        generation = node.generation
        request = self._seal_stream(message)

        def at_peer() -> None:
            if peer is None or not peer.up:
                return
            received = self._open_stream(request)
            if received is None:
                return
            reply = self._seal_stream(peer.driver.push_pull(received, self.clock.now))
            self.network.stream(peer.address, node.address, lambda: at_origin(reply))

        def at_origin(reply: PushPull | bytes) -> None:
            if not (node.up and node.generation == generation):
                return
            answer = self._open_stream(reply)
            if answer is not None:
                node.driver.push_pull_reply(address, answer, self.clock.now)

        self.network.stream(node.address, address, at_peer)

    def _seal_stream(self, message: PushPull) -> PushPull | bytes:
        if self.keyring is None:
            return message
        frame = seal_stream(message, self.keyring)
        self.wire.push_pulls_started += 1
        self.wire.stream_bytes_sent += len(frame)
        return frame

    def _open_stream(self, carried: PushPull | bytes) -> PushPull | None:
        if not isinstance(carried, bytes):
            return carried
        assert self.keyring is not None
        try:
            return open_stream(carried, self.keyring, self.wire.stream_frames)
        except CodecError:
            self.wire.stream_drops["malformed"] += 1
            return None

    def _send(self, node: SimNode, address: str, message: Datagram) -> None:
        if self.keyring is None:
            self.network.send(node.address, address, message)
            return
        try:
            packet, trimmed = seal_datagram(message, self.keyring, DEFAULT_LIMITS)
        except DatagramTooLarge:
            self.wire.datagram_drops["unsendable"] += 1
            return
        self.wire.datagrams_sent += 1
        self.wire.datagram_bytes_sent += len(packet)
        self.wire.datagrams_trimmed += trimmed
        self.network.send(node.address, address, packet)

    def _emit(self, node: SimNode, event: Event) -> None:
        match event:
            case Notify(kind=kind, member=member, incarnation=incarnation):
                if kind is EventKind.ALIVE and not self.record_alive:
                    self.alive_events += 1
                    return
                self.observations.append(
                    Observation(self.clock.now, node.id, kind, member, incarnation)
                )
            case Deliver(item=item):
                node.delivered.append(item)
                if node.on_deliver is not None:
                    node.on_deliver(node, item)

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


class _SimRuntime:
    """The `grid.core.swim.runtime.Runtime` of one simulated node."""

    __slots__ = ("node", "sim")

    def __init__(self, sim: Simulator, node: SimNode) -> None:
        self.sim = sim
        self.node = node

    def send(self, address: str, message: Datagram) -> None:
        """One datagram onto the fake network (sealed in sealed mode)."""
        self.sim._send(self.node, address, message)

    def schedule(self, timer: Timer, at: float) -> None:
        """A timer on the fake clock; it is void once the node crashes or restarts."""
        node = self.node
        self.sim.clock.call_at(at, self.sim._fire, node, node.generation, timer)

    def emit(self, event: Event) -> None:
        """Record the event (observations, delivered items)."""
        self.sim._emit(self.node, event)

    def exchange(self, address: str, message: PushPull) -> None:
        """A push-pull exchange over the fake network's streams."""
        self.sim._push_pull(self.node, address, message)
