"""The SWIM datagram edge: GRID-framed UDP in and out of one socket.

Inbound, every datagram goes through the same short pipeline, all of it
synchronous inside ``datagram_received``:

1. a datagram longer than the largest legal frame is dropped (``oversize``)
   before any cryptography is spent on it;
2. it is opened and decoded by the core's `grid.core.wire.sealed.open_datagram`
   (the simulator's sealed mode runs the same function): a frame that is too
   short, has a bad magic, an unknown version or fails authentication is
   dropped and counted under that reason in the core's `FrameCounters`
   (`TransportCounters.datagram_frames`); a plaintext that does not decode is
   a drop counted as ``malformed``;
4. the decoded message is handed to the owner (`SwimNode`), which feeds it to
   the machine from its one task. When the owner's backlog is full the message
   is dropped as ``backlog``: SWIM tolerates loss, memory must stay bounded.

Drops are silent: nothing about a dropped packet is logged or kept besides its
reason counter (SPEC-DECISIONS §3), so neither packet contents nor keys can
leak through logs.

Outbound, `grid.core.wire.sealed.seal_datagram` encodes a message, checks it
against the 1,400-byte plaintext budget and seals it with the primary key. The
machine sizes its piggyback with the codec's exact `encoded_size`, so the
budget check only trims when a size was wrong (counted as ``trimmed``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

# Re-exported: the SWIM edge names addresses with the core's one parser and formatter.
from grid.core.address import format_address as format_address
from grid.core.address import parse_address as parse_address
from grid.core.swim.admission import AdmissionCounters
from grid.core.swim.messages import Datagram
from grid.core.wire import codec
from grid.core.wire.frame import FRAME_REASONS, OVERHEAD_BYTES, FrameCounters
from grid.core.wire.keyring import Keyring
from grid.core.wire.sealed import open_datagram, seal_datagram
from grid.errors import ProtocolError, ValidationError

log = logging.getLogger(__name__)

RECEIVE_BUFFER_BYTES = 2 * 1024 * 1024
"""The kernel receive buffer a SWIM socket asks for (memberlist asks for the same)."""

EDGE_REASONS: tuple[str, ...] = (
    "oversize",
    "malformed",
    "backlog",
    "truncated",
    "timeout",
    "busy",
    "unsendable",
)
"""Why the transport dropped a datagram or stream frame that was not a frame error.

``oversize``: longer than the configured maximum; ``malformed``: authenticated but
not a valid SWIM message; ``backlog``: the owner's inbox was full; ``truncated``: a
stream closed mid-frame; ``timeout``: a stream exchange took too long; ``busy``: too
many concurrent stream connections; ``unsendable``: an outgoing message that could
not be encoded within its budget."""

DROP_REASONS: tuple[str, ...] = (*FRAME_REASONS, *EDGE_REASONS)
"""Why a datagram or stream frame was dropped: a closed set, safe as a metric label.

The first four are the frame's own reasons (`grid.core.wire.frame`), counted by
`Keyring.open_or_drop`; the rest are `EDGE_REASONS`."""

ReceiveCallback = Callable[[str, Datagram], None]
"""Called with the sender's ``"host:port"`` and the decoded datagram."""


def _edge_reasons() -> dict[str, int]:
    return dict.fromkeys(EDGE_REASONS, 0)


def _all_drops(frames: FrameCounters, edge: dict[str, int]) -> Mapping[str, int]:
    # A live read-only view over both parts, so a reader may hold on to it.
    return ChainMap(cast(dict[str, int], frames.dropped), edge)


@dataclass(slots=True)
class TransportCounters:
    """Traffic and drop counters of one node's SWIM transport (UDP and TCP).

    Byte counts are on-the-wire payload bytes (the sealed frame, plus the
    4-byte length prefix on streams), without IP and UDP/TCP headers. Drops are
    kept in two parts: frame errors in the core `FrameCounters`, filled by
    `Keyring.open_or_drop`, and the transport's own reasons (`EDGE_REASONS`);
    `datagrams_dropped` and `streams_dropped` show both per `DROP_REASONS`.
    """

    datagrams_sent: int = 0
    datagram_bytes_sent: int = 0
    datagrams_received: int = 0
    datagram_bytes_received: int = 0
    datagrams_trimmed: int = 0
    datagram_frames: FrameCounters = field(default_factory=FrameCounters)
    datagram_drops: dict[str, int] = field(default_factory=_edge_reasons)
    socket_errors: int = 0
    push_pulls_started: int = 0
    push_pulls_completed: int = 0
    push_pulls_failed: int = 0
    push_pulls_served: int = 0
    stream_bytes_sent: int = 0
    stream_bytes_received: int = 0
    stream_frames: FrameCounters = field(default_factory=FrameCounters)
    stream_drops: dict[str, int] = field(default_factory=_edge_reasons)
    machine_errors: int = 0
    events_dropped: int = 0
    members: AdmissionCounters = field(default_factory=AdmissionCounters)
    """The machine's member admission (`SwimNode` hands these to its machine)."""

    @property
    def datagrams_dropped(self) -> Mapping[str, int]:
        """Dropped datagrams per reason of `DROP_REASONS` (a live view)."""
        return _all_drops(self.datagram_frames, self.datagram_drops)

    @property
    def streams_dropped(self) -> Mapping[str, int]:
        """Dropped stream frames per reason of `DROP_REASONS` (a live view)."""
        return _all_drops(self.stream_frames, self.stream_drops)

    @property
    def bytes_sent(self) -> int:
        """Datagram and stream bytes sent."""
        return self.datagram_bytes_sent + self.stream_bytes_sent

    @property
    def bytes_received(self) -> int:
        """Datagram and stream bytes received."""
        return self.datagram_bytes_received + self.stream_bytes_received


def is_ip_literal(host: str) -> bool:
    """True when `host` is an IPv4 or IPv6 address rather than a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def resolve_address(text: str) -> str:
    """Resolve ``"name:port"`` to ``"ip:port"`` (IP literals pass through).

    The machine sends to the addresses it holds, and ``sendto`` with a name
    would resolve synchronously on every packet; so names are resolved once,
    here, before they reach the machine.
    """
    host, port = parse_address(text)
    if is_ip_literal(host):
        return format_address(host, port)
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    if not infos:
        raise ValidationError(f"cannot resolve {host}", path="address")
    resolved_host = str(infos[0][4][0])
    return format_address(resolved_host, port)


class DatagramEndpoint(asyncio.DatagramProtocol):
    """One UDP socket carrying GRID-framed SWIM datagrams."""

    def __init__(
        self,
        keyring: Keyring,
        counters: TransportCounters,
        on_receive: ReceiveCallback,
        *,
        datagram_bytes_max: int = 1400,
        limits: codec.CodecLimits = codec.DEFAULT_LIMITS,
    ) -> None:
        self.keyring = keyring
        self.counters = counters
        self._on_receive = on_receive
        self._datagram_bytes_max = datagram_bytes_max
        self._frame_bytes_max = datagram_bytes_max + OVERHEAD_BYTES
        self._limits = limits
        self._transport: asyncio.DatagramTransport | None = None
        self._peers: dict[str, tuple[str, int]] = {}

    # -- asyncio protocol ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport (asyncio calls this once the socket is bound)."""
        # Python 3.11's selector datagram transport does not subclass
        # DatagramTransport, although it implements it.
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        """Unseal, decode and hand over one datagram, or drop and count it."""
        counters = self.counters
        counters.datagrams_received += 1
        counters.datagram_bytes_received += len(data)
        if len(data) > self._frame_bytes_max:
            counters.datagram_drops["oversize"] += 1
            return
        try:
            message = open_datagram(data, self.keyring, counters.datagram_frames, self._limits)
        except ProtocolError:
            counters.datagram_drops["malformed"] += 1
            return
        if message is None:
            return
        self._on_receive(format_address(str(addr[0]), int(addr[1])), message)

    def error_received(self, exc: Exception) -> None:
        """An ICMP error (a peer's port is closed): count it, SWIM handles the loss."""
        self.counters.socket_errors += 1

    def connection_lost(self, exc: Exception | None) -> None:
        """The socket is closed."""
        self._transport = None

    # -- sending -------------------------------------------------------------

    @property
    def local_address(self) -> tuple[str, int]:
        """The bound ``(host, port)``."""
        if self._transport is None:
            raise RuntimeError("the datagram endpoint is closed")
        sockname = self._transport.get_extra_info("sockname")
        return str(sockname[0]), int(sockname[1])

    def send(self, address: str, message: Datagram) -> None:
        """Encode, seal and send one datagram to ``"host:port"``.

        A message the machine over-filled is re-packed with the prefix of its
        piggyback that fits; one that cannot fit at all is dropped and counted.
        """
        if self._transport is None or self._transport.is_closing():
            return
        try:
            packet, trimmed = seal_datagram(message, self.keyring, self._limits)
        except codec.DatagramTooLarge:
            self.counters.datagram_drops["unsendable"] += 1
            return
        self.counters.datagrams_trimmed += trimmed
        peer = self._peers.get(address)
        if peer is None:
            try:
                peer = parse_address(address)
            except ValidationError:
                self.counters.datagram_drops["unsendable"] += 1
                return
            if len(self._peers) < 65536:
                self._peers[address] = peer
        self.counters.datagrams_sent += 1
        self.counters.datagram_bytes_sent += len(packet)
        self._transport.sendto(packet, peer)

    def close(self) -> None:
        """Close the socket."""
        if self._transport is not None:
            self._transport.close()


async def open_endpoint(
    host: str,
    port: int,
    keyring: Keyring,
    counters: TransportCounters,
    on_receive: ReceiveCallback,
    *,
    datagram_bytes_max: int = 1400,
    limits: codec.CodecLimits = codec.DEFAULT_LIMITS,
    receive_buffer_bytes: int = RECEIVE_BUFFER_BYTES,
) -> DatagramEndpoint:
    """Bind a UDP socket on ``host:port`` and return its endpoint.

    The socket asks for a ``receive_buffer_bytes`` kernel buffer (the kernel caps
    it at ``net.core.rmem_max``): with the default of about 208 KiB a burst of
    80 full datagrams overflows it while the loop is busy, and the kernel drops
    gossip before the node ever sees it.
    """
    loop = asyncio.get_running_loop()
    transport, endpoint = await loop.create_datagram_endpoint(
        lambda: DatagramEndpoint(
            keyring,
            counters,
            on_receive,
            datagram_bytes_max=datagram_bytes_max,
            limits=limits,
        ),
        local_addr=(host, port),
    )
    sock = transport.get_extra_info("socket")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
    except OSError:  # a platform that refuses keeps its default buffer
        log.debug("the SWIM socket keeps the default receive buffer")
    return endpoint
