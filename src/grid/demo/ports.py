"""Loopback ports for the processes of a local mesh, each handed out once per process.

A port is chosen before the process that listens on it starts, so another
chooser must not be handed the same port meanwhile. Every `PortPicker` of a
process shares one ledger, so a mesh plan, a test's extra operator and a
bench's forwarder never draw the same port. Separate processes that run side by
side keep apart by drawing from different ranges: ``GRID_DEMO_PORT_RANGE``
(``LOW-HIGH``, high exclusive) narrows `PORT_RANGE` for one process and its
children, as ``make test`` does for each of its two shards.
"""

from __future__ import annotations

import os
import random
import socket

PORT_RANGE = (20000, 32000)
"""Where demo ports are drawn: below Linux's default ephemeral range (32768-60999),
so the many outgoing connections of a running mesh (scrapes, probes, push-pull)
can never be handed a port the plan reserved for a listener."""
RANGE_ENV = "GRID_DEMO_PORT_RANGE"
_LEDGER_LIMIT = 4096
"""Ports handed out that the ledger remembers; past it the oldest are forgotten
(a process that has drawn that many has long bound or released the first)."""
_handed_out: dict[int, None] = {}


def port_range() -> tuple[int, int]:
    """`PORT_RANGE`, or the narrower range ``GRID_DEMO_PORT_RANGE`` names."""
    raw = os.environ.get(RANGE_ENV, "").strip()
    if not raw:
        return PORT_RANGE
    low, sep, high = raw.partition("-")
    if not (sep and low.isdigit() and high.isdigit() and 1024 <= int(low) < int(high) <= 65536):
        raise ValueError(f"{RANGE_ENV} must be LOW-HIGH with 1024 <= LOW < HIGH <= 65536")
    return int(low), int(high)


class PortPicker:
    """Hands out loopback ports, each free for both TCP and UDP when drawn and
    never handed out before by any picker of this process."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._range = port_range()

    def __call__(self) -> int:
        """A port not handed out before and bindable right now."""
        for _ in range(256):
            port = self._rng.randrange(*self._range)
            if port not in _handed_out and _bindable(port):
                _remember(port)
                return port
        raise OSError("no free port for both UDP and TCP on 127.0.0.1")


def _remember(port: int) -> None:
    _handed_out[port] = None
    while len(_handed_out) > _LEDGER_LIMIT:
        del _handed_out[next(iter(_handed_out))]


def _bindable(port: int) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind(("127.0.0.1", port))
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def free_port() -> int:
    """One port free for both UDP and TCP on 127.0.0.1 and not handed out before."""
    return PortPicker()()
