"""TCP push-pull anti-entropy: whole member tables and lane state, both ways.

Datagrams carry at most 1,400 plaintext bytes, so gossip alone cannot move a
state lane with thousands of providers. Push-pull can: a member opens a TCP
connection to a peer (on the same port number as its UDP socket, 7946 by
default), sends its full state as one `PushPull`, and reads the peer's full
state back. The machine decides when: on join (with each seed) and every
``push_pull_interval_s`` with one random live member.

Framing (SPEC-DECISIONS §3): every message on the stream is a 4-byte
big-endian length followed by that many bytes of one GRID frame (the same
AES-256-GCM frame as datagrams), whose plaintext is one codec ``Stream``.

The stream is split with the core's sans-IO `grid.core.wire.codec.StreamDeframer`
and written with `prefix_length`; messages are sealed and opened with the
core's `grid.core.wire.sealed` (as in the simulator's sealed mode), which
counts a frame that fails to unseal under its reason in
`TransportCounters.stream_frames`.

Everything read from the network is bounded: the deframer checks the declared
length against ``frame_bytes_max`` before it buffers the body, and the whole
exchange runs under ``timeout_s``. A frame that is too long, truncated, late,
fails to unseal or to decode is dropped, counted by reason and the connection
closed; nothing about its contents is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from grid.adapters.udp import TransportCounters, parse_address
from grid.core.swim.messages import PushPull
from grid.core.wire import codec
from grid.core.wire.codec import LENGTH_PREFIX_BYTES, StreamDeframer, prefix_length
from grid.core.wire.frame import OVERHEAD_BYTES
from grid.core.wire.keyring import Keyring
from grid.core.wire.sealed import open_stream, seal_stream
from grid.errors import ProtocolError, ValidationError

READ_CHUNK_BYTES = 64 * 1024
"""Bytes asked of the socket per read; the deframer bounds what is buffered."""


@dataclass(frozen=True, slots=True)
class PushPullSettings:
    """Limits of the TCP anti-entropy exchange."""

    frame_bytes_max: int = codec.DEFAULT_LIMITS.stream_bytes_max + OVERHEAD_BYTES
    """Largest sealed frame accepted or sent, in bytes (the codec's plaintext
    limit plus the 33-byte frame overhead). It bounds the memory one peer can
    make us allocate; it must hold the whole member table and every origin's
    lanes, so raise it together with the codec's ``stream_bytes_max``."""

    timeout_s: float = 10.0
    """Seconds one exchange may take, connect to last byte (memberlist's
    TCPTimeout is also 10 s). Too short fails large exchanges on slow links;
    too long lets a stalled peer hold a connection slot."""

    connections_max: int = 32
    """Concurrent inbound exchanges served; more are closed at once (``busy``).
    Bounds memory under a connection flood at the cost of refusing bursts."""

    outbound_max: int = 8
    """Concurrent outbound exchanges; further requests are skipped (the next
    periodic exchange retries). Joins through many seeds start one each."""

    codec_limits: codec.CodecLimits = codec.DEFAULT_LIMITS
    """Bounds on a decoded `PushPull` (members, items, names, payload sizes)."""


class StreamDrop(ProtocolError):
    """A stream frame was dropped; ``reason`` is one of `udp.DROP_REASONS`."""

    code = "push_pull_dropped"

    def __init__(self, reason: str) -> None:
        super().__init__(f"push-pull frame dropped: {reason}")
        self.reason = reason


class FrameDropped(ProtocolError):
    """A stream frame failed to unseal; `Keyring.open_or_drop` already counted it."""

    code = "push_pull_frame_dropped"


async def read_frame(reader: asyncio.StreamReader, frame_bytes_max: int) -> bytes:
    """Read one length-prefixed frame (not yet opened); raises `StreamDrop` with the reason.

    The caller applies the timeout.
    """
    deframer = StreamDeframer(frame_bytes_max)
    frames: list[bytes] = []
    while not frames:
        chunk = await reader.read(READ_CHUNK_BYTES)
        if not chunk:
            raise StreamDrop("truncated")
        try:
            frames = deframer.feed(chunk)
        except codec.CodecError as exc:
            raise StreamDrop("oversize") from exc
    return frames[0]


def open_push_pull(
    frame: bytes,
    keyring: Keyring,
    counters: TransportCounters,
    limits: codec.CodecLimits = codec.DEFAULT_LIMITS,
) -> PushPull:
    """Unseal and decode one stream frame (`grid.core.wire.sealed.open_stream`).

    Raises `FrameDropped` (already counted under its frame reason) or
    `StreamDrop("malformed")`.
    """
    try:
        message = open_stream(frame, keyring, counters.stream_frames, limits)
    except ProtocolError as exc:
        raise StreamDrop("malformed") from exc
    if message is None:
        raise FrameDropped("push-pull frame failed to unseal")
    return message


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, asyncio.CancelledError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), 1.0)


def _encode(message: PushPull, settings: PushPullSettings, keyring: Keyring) -> bytes:
    sealed = seal_stream(message, keyring)
    if len(sealed) > settings.frame_bytes_max:
        raise StreamDrop("unsendable")
    return prefix_length(sealed)


Responder = Callable[[PushPull], Awaitable[PushPull]]
"""Given a peer's state, returns ours (the machine merges theirs meanwhile)."""


class PushPullServer:
    """Answers anti-entropy exchanges: read one frame, reply one frame, close."""

    def __init__(
        self,
        keyring: Keyring,
        counters: TransportCounters,
        respond: Responder,
        settings: PushPullSettings | None = None,
    ) -> None:
        self.keyring = keyring
        self.counters = counters
        self.settings = settings or PushPullSettings()
        self._respond = respond
        self._active = 0
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> asyncio.Server:
        """Listen on ``host:port`` (TCP)."""
        self._server = await asyncio.start_server(self._serve, host, port)
        return self._server

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the push-pull server is not listening")
        return int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counters = self.counters
        if self._active >= self.settings.connections_max:
            counters.stream_drops["busy"] += 1
            await _close(writer)
            return
        self._active += 1
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                frame = await read_frame(reader, self.settings.frame_bytes_max)
                counters.stream_bytes_received += LENGTH_PREFIX_BYTES + len(frame)
                remote = open_push_pull(frame, self.keyring, counters, self.settings.codec_limits)
                reply = await self._respond(remote)
                sent = _encode(reply, self.settings, self.keyring)
                writer.write(sent)
                await writer.drain()
                counters.stream_bytes_sent += len(sent)
                counters.push_pulls_served += 1
        except StreamDrop as exc:
            counters.stream_drops[exc.reason] += 1
        except FrameDropped:
            pass  # counted by its frame reason
        except TimeoutError:
            counters.stream_drops["timeout"] += 1
        except ConnectionAbortedError:
            pass  # our node is stopping; the peer retries elsewhere
        except OSError:
            counters.stream_drops["truncated"] += 1
        finally:
            self._active -= 1
            await _close(writer)

    async def close(self) -> None:
        """Stop listening (exchanges in flight finish under their timeout)."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), self.settings.timeout_s)
            self._server = None


async def exchange(
    address: str,
    message: PushPull,
    keyring: Keyring,
    counters: TransportCounters,
    settings: PushPullSettings | None = None,
) -> PushPull | None:
    """Push our state to the peer at ``"host:port"`` and pull theirs.

    Returns the peer's `PushPull`, or None when the exchange failed (refused,
    timed out, or the reply was dropped). A failed exchange needs no report:
    the machine retries on its next tick.
    """
    settings = settings or PushPullSettings()
    counters.push_pulls_started += 1
    writer: asyncio.StreamWriter | None = None
    try:
        host, port = parse_address(address)
        async with asyncio.timeout(settings.timeout_s):
            frame = _encode(message, settings, keyring)
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(frame)
            await writer.drain()
            counters.stream_bytes_sent += len(frame)
            received = await read_frame(reader, settings.frame_bytes_max)
            counters.stream_bytes_received += LENGTH_PREFIX_BYTES + len(received)
            reply = open_push_pull(received, keyring, counters, settings.codec_limits)
    except StreamDrop as exc:
        counters.stream_drops[exc.reason] += 1
        counters.push_pulls_failed += 1
        return None
    except FrameDropped:
        counters.push_pulls_failed += 1
        return None
    except TimeoutError:
        counters.stream_drops["timeout"] += 1
        counters.push_pulls_failed += 1
        return None
    except (OSError, ValidationError):
        counters.push_pulls_failed += 1
        return None
    finally:
        if writer is not None:
            await _close(writer)
    counters.push_pulls_completed += 1
    return reply
