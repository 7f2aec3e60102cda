"""Sealed SWIM messages: one step from a message to its GRID frame, and back.

A datagram's plaintext is one codec ``Datagram`` inside one GRID frame; a
push-pull message is one codec ``Stream`` inside one frame (the TCP framing's
length prefix is added by the stream writer). These four functions are the
whole path between the machine's messages and the bytes on the wire, and both
sides of the house use them: the UDP endpoint and the push-pull stream on real
sockets (`grid.adapters.udp`, `grid.adapters.pushpull`) and the simulator's
sealed mode (`grid.testing.simulator`), so simulations exercise the very
encode, seal, unseal and decode production runs.

Opening has three outcomes: the message; ``None`` when the frame fails (too
short, bad magic, unknown version, no key authenticates it), its reason
counted in the given `FrameCounters`; or a `CodecError` when an authentic
plaintext is not a valid message. Nothing about a dropped packet is kept.
"""

from __future__ import annotations

from grid.core.swim.messages import Datagram, PushPull
from grid.core.wire.codec import (
    DEFAULT_LIMITS,
    CodecLimits,
    DatagramTooLarge,
    decode_datagram,
    decode_stream,
    encode_datagram,
    encode_stream,
    pack_datagram,
)
from grid.core.wire.frame import FrameCounters
from grid.core.wire.keyring import Keyring


def seal_datagram(
    message: Datagram, keyring: Keyring, limits: CodecLimits = DEFAULT_LIMITS
) -> tuple[bytes, bool]:
    """Encode and seal one datagram; returns the frame and whether it was trimmed.

    A message whose piggyback overfills the plaintext budget keeps the prefix
    of its updates, then items, that fits (trimmed). Raises `DatagramTooLarge`
    when even the bare message does not fit.
    """
    try:
        return keyring.seal(encode_datagram(message, limits)), False
    except DatagramTooLarge:
        plaintext, _, _ = pack_datagram(message, limits)
        return keyring.seal(plaintext), True


def open_datagram(
    packet: bytes, keyring: Keyring, frames: FrameCounters, limits: CodecLimits = DEFAULT_LIMITS
) -> Datagram | None:
    """Unseal and decode one datagram; None when the frame fails (counted in `frames`).

    Raises `CodecError` when the authentic plaintext is not a valid datagram.
    """
    plaintext = keyring.open_or_drop(packet, frames)
    if plaintext is None:
        return None
    return decode_datagram(plaintext, limits)


def seal_stream(message: PushPull, keyring: Keyring) -> bytes:
    """Encode and seal one push-pull message as one frame (without its length prefix)."""
    return keyring.seal(encode_stream(message))


def open_stream(
    frame: bytes, keyring: Keyring, frames: FrameCounters, limits: CodecLimits = DEFAULT_LIMITS
) -> PushPull | None:
    """Unseal and decode one push-pull frame; None when the frame fails (counted in `frames`).

    Raises `CodecError` when the authentic plaintext is not a valid stream message.
    """
    plaintext = keyring.open_or_drop(frame, frames)
    if plaintext is None:
        return None
    return decode_stream(plaintext, limits)
