"""`SwimNode`: one member of the encrypted SWIM mesh, on real sockets.

This is the runtime around the pure `grid.core.swim.machine.SwimMachine`, the
piece the operator starts. It binds one UDP socket and one TCP listener on the
same port (7946 by default), and one asyncio task owns the machine: every
input (datagrams, timers, push-pull state, the owner's commands) reaches the
machine through that task, so the machine needs no locks and sees one
monotonic clock, the event loop's.

The task drives the machine with the core's `grid.core.swim.runtime.Driver`,
the same driver the simulator uses, and implements its `Runtime`:

- ``Send`` → encode, seal and ``sendto`` (`grid.adapters.udp`);
- ``Schedule`` → one timer heap with a single ``loop.call_at`` armed for its
  earliest entry (`TimerHeap`); timers are never cancelled, the machine ignores
  stale ones, so nothing per timer outlives its firing;
- ``Notify`` and ``Deliver`` → the bounded `SwimNode.events` queue. With a
  `GridState` replica, the machine merged a delivered item through
  `grid.core.crdt.sync.admission` before holding it (an item the replica
  refused is counted in ``replica.counters`` and leaves no trace);
- ``PushPullRequest`` → a TCP exchange (`grid.adapters.pushpull`), whose reply
  comes back through the task to `Driver.push_pull_reply`.

With a replica, the machine admits at once announced members whose name a
verified grid-CA certificate carries (`grid.core.crdt.sync.vouch`); everyone
else answers a challenge first (`grid.core.swim.admission`), and the counts
land in ``counters.members``.

A machine input that raises is logged with its traceback and counted
(``machine_errors``); the node goes on with the next input.

Usage::

    node = await SwimNode.start("site-a", "0.0.0.0:7946", keyring,
                                advertise="10.0.0.5:7946", seeds=["10.0.0.6:7946"])
    event = await node.events.get()   # Notify(...) or Deliver(...)
    await node.publish(item)          # a BroadcastItem of ours
    await node.leave()                # graceful: peers see "left", not "failed"
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from grid.adapters.pushpull import PushPullServer, PushPullSettings, exchange
from grid.adapters.timers import TimerHeap
from grid.adapters.udp import (
    DatagramEndpoint,
    TransportCounters,
    format_address,
    is_ip_literal,
    open_endpoint,
    parse_address,
    resolve_address,
)
from grid.core.crdt import sync
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import GridStateSnapshot
from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import Deliver, Effect, Notify, Timer
from grid.core.swim.machine import NodeStatus, SwimMachine
from grid.core.swim.members import Member, MemberState
from grid.core.swim.messages import BroadcastItem, Datagram, PushPull
from grid.core.swim.runtime import Driver
from grid.core.wire import codec
from grid.core.wire.codec import encoded_size
from grid.core.wire.keyring import Keyring
from grid.errors import ValidationError

log = logging.getLogger(__name__)

SwimEvent = Notify | Deliver
"""What the owner reads from `SwimNode.events`."""
Command = Callable[[float], Any]
"""One input for the machine's task, given ``now``; it returns the caller's result."""
MachineCommand = Callable[[SwimMachine, float], tuple[Any, list[Effect]]]
"""An owner's command on the machine: its result and the effects to carry out."""


@dataclass(frozen=True, slots=True)
class SwimNodeSettings:
    """Limits of the runtime around the machine (the protocol's are in `SwimConfig`)."""

    inbox_datagrams_max: int = 4096
    """Decoded datagrams waiting for the machine task; beyond it they are dropped
    (``backlog``). Bounds memory under a flood; SWIM tolerates the loss."""

    events_max: int = 10_000
    """Events waiting in `SwimNode.events` for the owner; beyond it new events are
    dropped and counted (``events_dropped``). An owner that stops reading loses
    events rather than the process its memory."""

    batch_max: int = 256
    """Inputs the task handles before yielding to the event loop, so a burst of
    datagrams cannot starve the sockets and timers."""

    bind_attempts: int = 16
    """Tries to find a port free for both UDP and TCP when binding port 0."""

    codec_limits: codec.CodecLimits = codec.DEFAULT_LIMITS
    """Bounds on decoded datagrams, and the 1,400-byte plaintext budget
    (push-pull messages have their own in `PushPullSettings.codec_limits`)."""

    push_pull: PushPullSettings = field(default_factory=PushPullSettings)
    """Limits of the TCP anti-entropy exchange."""


async def _bind(
    host: str, port: int, attempts: int, open_udp: Callable[[int], Any], server: PushPullServer
) -> DatagramEndpoint:
    """Bind UDP and TCP on the same port; with port 0, retry until one is free for both."""
    for _ in range(attempts if port == 0 else 1):
        await server.start(host, port)
        try:
            endpoint: DatagramEndpoint = await open_udp(server.port)
        except OSError:
            await server.close()
            if port != 0:
                raise
            continue
        return endpoint
    raise OSError("no port free for both UDP and TCP")


class SwimNode:
    """One SWIM member on real sockets; build it with `SwimNode.start`."""

    def __init__(
        self, keyring: Keyring, settings: SwimNodeSettings, replica: GridState | None
    ) -> None:
        """Use `SwimNode.start`; this only prepares the pieces."""
        self._driver: Driver | None = None
        self.keyring = keyring
        self.settings = settings
        self.replica = replica
        self.counters = TransportCounters()
        self.events: asyncio.Queue[SwimEvent] = asyncio.Queue(settings.events_max)
        self._loop = asyncio.get_running_loop()
        self._packets: deque[tuple[str, Datagram]] = deque()
        self._commands: deque[tuple[Command, asyncio.Future[Any], bool]] = deque()
        self._wakeup = asyncio.Event()
        self._timers: TimerHeap[Timer] = TimerHeap(self._loop, self._wakeup.set)
        self._exchanges: set[asyncio.Task[None]] = set()
        self._server = PushPullServer(keyring, self.counters, self._respond, settings.push_pull)
        self._endpoint: DatagramEndpoint | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    # -- lifecycle -----------------------------------------------------------

    @classmethod
    async def start(
        cls,
        node_id: str,
        bind: str,
        keyring: Keyring,
        *,
        config: SwimConfig | None = None,
        seeds: Iterable[str] = (),
        advertise: str | None = None,
        settings: SwimNodeSettings | None = None,
        replica: GridState | None = None,
        rng: random.Random | None = None,
    ) -> SwimNode:
        """Bind ``host:port`` (UDP and TCP), start the machine task and join.

        `advertise` is the ``host:port`` peers reach us at; it defaults to the
        bound address, which must then be a specific IP (not 0.0.0.0 or ::).
        Seeds given as names are resolved once, here. With no seeds the node
        starts a new cluster.
        """
        settings = settings or SwimNodeSettings()
        host, port = parse_address(bind)
        node = cls(keyring, settings, replica)
        endpoint = await _bind(
            host,
            port,
            settings.bind_attempts,
            lambda p: open_endpoint(
                host,
                p,
                keyring,
                node.counters,
                node._receive,
                datagram_bytes_max=settings.codec_limits.datagram_bytes_max,
                limits=settings.codec_limits,
            ),
            node._server,
        )
        node._endpoint = endpoint
        try:
            await node._launch(node_id, advertise, seeds, config, rng)
        except BaseException:
            await node.stop()
            raise
        return node

    async def _launch(
        self,
        node_id: str,
        advertise: str | None,
        seeds: Iterable[str],
        config: SwimConfig | None,
        rng: random.Random | None,
    ) -> None:
        """Create the machine at the advertised address, start its task and join."""
        assert self._endpoint is not None
        bound_host, bound_port = self._endpoint.local_address
        if advertise is None:
            if not is_ip_literal(bound_host) or bound_host in ("0.0.0.0", "::"):
                raise ValidationError("binding a wildcard address needs advertise", path="bind")
            advertise = format_address(bound_host, bound_port)
        else:
            advertise = await resolve_address(advertise)
        resolved = [await resolve_address(seed) for seed in seeds]
        machine = SwimMachine(
            node_id,
            advertise,
            rng=rng or random.Random(),
            config=config,
            size_of=encoded_size,
            admit=None if self.replica is None else sync.admission(self.replica),
            vouch=None if self.replica is None else sync.vouch(self.replica),
            counters=self.counters.members,
        )
        self._driver = Driver(machine, _SocketRuntime(self))
        self._task = asyncio.create_task(self._run(), name=f"swim:{node_id}")
        await self._order(lambda m, now: (None, m.join(resolved, now)))

    @property
    def machine(self) -> SwimMachine:
        """The membership machine (read its views; only the node's task mutates it)."""
        return self.driver.machine

    @property
    def driver(self) -> Driver:
        """The core driver of the machine (only the node's task feeds it)."""
        if self._driver is None:
            raise RuntimeError("the SWIM node has not started")
        return self._driver

    @property
    def node_id(self) -> str:
        """This member's id (its site name)."""
        return self.machine.node_id

    @property
    def address(self) -> str:
        """The advertised ``host:port`` (UDP and TCP)."""
        return self.machine.address

    async def leave(self) -> None:
        """Leave gracefully: tell peers we left (they record "left", not "failed"), then stop."""
        if self._task is not None and not self._task.done():
            await self._order(lambda m, now: (None, m.leave(now)))
        await self.stop()

    async def stop(self) -> None:
        """Stop at once, without a farewell (peers will detect a failure)."""
        if self._stopped:
            return
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._timers.close()
        while self._commands:
            _, future, _ = self._commands.popleft()
            if not future.done():
                future.set_exception(ConnectionAbortedError("the SWIM node stopped"))
        for task in list(self._exchanges):
            task.cancel()
        if self._exchanges:
            await asyncio.gather(*self._exchanges, return_exceptions=True)
        if self._endpoint is not None:
            self._endpoint.close()
        await self._server.close()

    async def __aenter__(self) -> SwimNode:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- the owner's commands -------------------------------------------------

    async def publish(self, item: BroadcastItem) -> None:
        """Disseminate an item of ours (its revision must grow per lane)."""
        await self._order(lambda m, now: (None, m.publish(item, now)))

    async def publish_snapshot(self, snapshot: GridStateSnapshot) -> int:
        """Install our new snapshot in the replica and publish the lanes that moved."""
        return await self.write_local(lambda _current: snapshot)

    async def write_local(self, change: sync.Change) -> int:
        """Apply ``change`` to our snapshot in the machine's task and publish what moved.

        Running there, the change always starts from the newest local snapshot
        (re-assertions included), so a local write never races one.
        """
        replica = self.replica
        if replica is None:
            raise ValidationError("this node has no replica", path="replica")

        def command(machine: SwimMachine, now: float) -> tuple[int, list[Effect]]:
            return sync.write_local(replica, machine, change, now)

        count: int = await self._order(command)
        return count

    async def forget_origin(self, origin: str) -> None:
        """Drop what the machine holds of ``origin`` (its trust was withdrawn)."""

        def command(machine: SwimMachine, _now: float) -> tuple[None, list[Effect]]:
            machine.forget_origin(origin)
            return None, []

        await self._order(command)

    def set_keyring(self, keyring: Keyring) -> None:
        """Switch keys (rotation): later datagrams and exchanges use the new keyring.

        Rotate without a flag day by installing the new key as accepted
        everywhere first, then as primary everywhere (SPEC-DECISIONS §3).
        """
        self.keyring = keyring
        self._server.keyring = keyring
        if self._endpoint is not None:
            self._endpoint.keyring = keyring

    def members(self) -> list[Member]:
        """The current member table (tombstones included, ourselves excluded)."""
        return self.machine.members()

    def members_in(self, state: MemberState) -> set[str]:
        """Ids of the members we hold in `state`."""
        return {m.id for m in self.machine.members() if m.state is state}

    @property
    def status(self) -> NodeStatus:
        """Idle, joined or left."""
        return self.machine.status

    # -- the machine task ----------------------------------------------------

    def _order(self, command: MachineCommand) -> asyncio.Future[Any]:
        """Run an owner's command on the machine in its task; the future holds its result."""
        driver = self.driver
        return self._submit(lambda now: driver.run(command, now))

    def _submit(self, command: Command, *, from_peer: bool = False) -> asyncio.Future[Any]:
        if self._task is None or self._task.done() or self._stopped:
            raise ConnectionAbortedError("the SWIM node is not running")
        future: asyncio.Future[Any] = self._loop.create_future()
        self._commands.append((command, future, from_peer))
        self._wakeup.set()
        return future

    def _receive(self, source: str, message: Datagram) -> None:
        if len(self._packets) >= self.settings.inbox_datagrams_max:
            self.counters.datagram_drops["backlog"] += 1
            return
        self._packets.append((source, message))
        self._wakeup.set()

    async def _respond(self, remote: PushPull) -> PushPull:
        driver = self.driver
        reply: PushPull = await self._submit(
            lambda now: driver.push_pull(remote, now), from_peer=True
        )
        return reply

    async def _run(self) -> None:
        """The one task that touches the machine."""
        budget = self.settings.batch_max
        driver = self.driver
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            handled = 0
            while self._commands and handled < budget:
                self._run_command(*self._commands.popleft())
                handled += 1
            now = self._loop.time()
            for timer in self._timers.pop_due(now):
                self._guarded(driver.timer, timer)
            self._timers.rearm()
            while self._packets and handled < budget:
                source, message = self._packets.popleft()
                self._guarded(driver.packet, source, message)
                handled += 1
            if self._commands or self._packets:
                self._wakeup.set()
                await asyncio.sleep(0)

    def _run_command(self, command: Command, future: asyncio.Future[Any], from_peer: bool) -> None:
        """Run one command; an owner's failure is its caller's, a peer's input failure ours."""
        try:
            result = command(self._loop.time())
        except Exception as exc:
            failure: Exception = exc
            if from_peer:
                self._machine_failed()
                failure = ConnectionAbortedError("the SWIM machine failed on this input")
            if not future.done():
                future.set_exception(failure)
            return
        if not future.done():
            future.set_result(result)

    def _guarded(self, step: Callable[..., None], *args: Any) -> None:
        """Run one machine input (``now`` goes last); a bug in it must not take the node down."""
        try:
            step(*args, self._loop.time())
        except Exception:
            self._machine_failed()

    def _machine_failed(self) -> None:
        """Count and log (with its traceback) the exception being handled; the node goes on."""
        self.counters.machine_errors += 1
        log.exception("SWIM machine input failed")

    def _emit(self, event: SwimEvent) -> None:
        try:
            self.events.put_nowait(event)
        except asyncio.QueueFull:
            self.counters.events_dropped += 1

    def _start_exchange(self, address: str, message: PushPull) -> None:
        if self._stopped or len(self._exchanges) >= self.settings.push_pull.outbound_max:
            return
        task = asyncio.create_task(self._exchange(address, message))
        self._exchanges.add(task)
        task.add_done_callback(self._exchanges.discard)

    async def _exchange(self, address: str, message: PushPull) -> None:
        reply = await exchange(
            address, message, self.keyring, self.counters, self.settings.push_pull
        )
        if reply is None or self._stopped or self._task is None or self._task.done():
            return
        driver = self.driver
        future = self._submit(
            lambda now: driver.push_pull_reply(address, reply, now), from_peer=True
        )
        future.add_done_callback(_retrieve)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Take a finished future's exception, if any (it was counted and logged already)."""
    if not future.cancelled():
        future.exception()


class _SocketRuntime:
    """The `grid.core.swim.runtime.Runtime` of a `SwimNode`: its socket, timers and queue."""

    __slots__ = ("_node",)

    def __init__(self, node: SwimNode) -> None:
        self._node = node

    def send(self, address: str, message: Datagram) -> None:
        """Encode, seal and send one datagram (`DatagramEndpoint.send`)."""
        endpoint = self._node._endpoint
        if endpoint is not None:
            endpoint.send(address, message)

    def schedule(self, timer: Timer, at: float) -> None:
        """Put the timer in the node's heap (one ``call_at`` for the earliest)."""
        self._node._timers.schedule(timer, at)

    def emit(self, event: SwimEvent) -> None:
        """Queue the event for the owner (`SwimNode.events`, bounded)."""
        self._node._emit(event)

    def exchange(self, address: str, message: PushPull) -> None:
        """Start a TCP push-pull exchange; its reply returns through the task."""
        self._node._start_exchange(address, message)
