"""The one driver of a `SwimMachine`: inputs in, every effect carried out through a `Runtime`.

A runtime is whatever gives the machine a network and a clock: `SwimNode` on
real sockets (`grid.adapters.swim_node`) and the simulator on a fake network
(`grid.testing.simulator`). Each implements the four verbs of `Runtime`, and
neither interprets effects itself: `carry_out` maps every effect to its verb
with an exhaustive `match`, and `Driver` maps every input to the machine
method it belongs to. So what the simulations exercise is what production
runs, down to which merge a push-pull reply goes through (a reply owes
introductions to the members it names; a request does not).

A runtime's `exchange` opens a push-pull exchange and, when the peer's reply
arrives, hands it to `Driver.push_pull_reply` on the machine's own task; a
failed exchange needs no report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar, assert_never

from grid.core.swim.effects import (
    Deliver,
    Effect,
    Notify,
    PushPullRequest,
    Schedule,
    Send,
    Timer,
)
from grid.core.swim.machine import SwimMachine
from grid.core.swim.messages import Datagram, PushPull

Event = Notify | Deliver
"""What the machine tells its owner."""

T = TypeVar("T")


class Runtime(Protocol):
    """What a machine needs from the world: datagrams, a clock, its owner, streams."""

    def send(self, address: str, message: Datagram) -> None:
        """Send `message` as one datagram to ``"host:port"`` (encode, seal, send)."""

    def schedule(self, timer: Timer, at: float) -> None:
        """Arrange for `Driver.timer(timer, now)` at `at`, never earlier."""

    def emit(self, event: Event) -> None:
        """Tell the owner: a membership event or a newly delivered item."""

    def exchange(self, address: str, message: PushPull) -> None:
        """Open a push-pull exchange; pass the reply to `Driver.push_pull_reply`."""


def carry_out(effects: Iterable[Effect], runtime: Runtime) -> None:
    """Carry out `effects` in order through `runtime`: the one effect interpreter."""
    for effect in effects:
        match effect:
            case Send(address=address, message=message):
                runtime.send(address, message)
            case Schedule(timer=timer, at=at):
                runtime.schedule(timer, at)
            case Notify() | Deliver():
                runtime.emit(effect)
            case PushPullRequest(address=address, message=message):
                runtime.exchange(address, message)
            case _:
                assert_never(effect)


class Driver:
    """Feeds one machine its inputs and carries out what each returns."""

    __slots__ = ("machine", "runtime")

    def __init__(self, machine: SwimMachine, runtime: Runtime) -> None:
        self.machine = machine
        self.runtime = runtime

    def packet(self, source: str, message: Datagram, now: float) -> None:
        """A decoded datagram from ``source``."""
        carry_out(self.machine.handle_packet(source, message, now), self.runtime)

    def timer(self, timer: Timer, now: float) -> None:
        """A timer the machine scheduled is due."""
        carry_out(self.machine.handle_timer(timer, now), self.runtime)

    def push_pull(self, request: PushPull, now: float) -> PushPull:
        """A peer opened an exchange: merge its state; returns our reply for it."""
        reply, effects = self.machine.handle_push_pull(request, now)
        carry_out(effects, self.runtime)
        return reply

    def push_pull_reply(self, address: str, reply: PushPull, now: float) -> None:
        """The reply from `address` to one of our exchanges: merged, its members owed
        introductions (and admitted when `address` is a configured seed)."""
        carry_out(self.machine.handle_push_pull_reply(address, reply, now), self.runtime)

    def run(self, command: Callable[[SwimMachine, float], tuple[T, list[Effect]]], now: float) -> T:
        """An owner's command (join, leave, publish, a local write): its result."""
        result, effects = command(self.machine, now)
        carry_out(effects, self.runtime)
        return result
