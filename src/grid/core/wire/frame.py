"""The GRID frame: AES-256-GCM around every SWIM datagram and push-pull message.

Layout (seed 003, SPEC-DECISIONS §3), 33 bytes of overhead in all::

    b"GRID" | 0x01 | nonce (12 bytes) | ciphertext | GCM tag (16 bytes)

The associated data is empty. `seal` and `unseal` are the documented test seam.
`unseal` has two outcomes: the plaintext, or a `FrameError` whose ``reason`` is
``too_short``, ``bad_magic``, ``unknown_version`` or ``auth_failed``; callers
drop such packets silently and count the reason in `FrameCounters`.

Nonces. ``seal(key, plaintext)`` draws a fresh 96-bit nonce from `secrets`,
the OS CSPRNG, which keeps the AES-GCM nonce collision probability negligible
for any realistic number of frames per key. This module is the one place in the
core allowed to import `secrets` (the import contract in pyproject.toml names
it): a GCM nonce must never repeat under a key, so it cannot come from an
injected, seedable `random.Random`. Callers that need a fixed frame (test
vectors) pass ``nonce``.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from grid.errors import ProtocolError

MAGIC = b"GRID"
VERSION = 0x01
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32
HEADER_BYTES = len(MAGIC) + 1 + NONCE_BYTES
OVERHEAD_BYTES = HEADER_BYTES + TAG_BYTES
"""33 bytes: magic, version, nonce and tag."""

FrameReason = Literal["too_short", "bad_magic", "unknown_version", "auth_failed"]
FRAME_REASONS: tuple[FrameReason, ...] = (
    "too_short",
    "bad_magic",
    "unknown_version",
    "auth_failed",
)


class FrameError(ProtocolError):
    """A packet that is not a valid GRID frame for any accepted key."""

    reason: FrameReason = "auth_failed"
    code = "frame_auth_failed"


class FrameTooShort(FrameError):
    """Shorter than the 33 bytes of header and tag."""

    reason: FrameReason = "too_short"
    code = "frame_too_short"


class FrameBadMagic(FrameError):
    """Does not start with ``b"GRID"``."""

    reason: FrameReason = "bad_magic"
    code = "frame_bad_magic"


class FrameUnknownVersion(FrameError):
    """Carries a version other than 0x01."""

    reason: FrameReason = "unknown_version"
    code = "frame_unknown_version"


class FrameAuthFailed(FrameError):
    """No accepted key authenticates it: a wrong key or tampered bytes."""

    reason: FrameReason = "auth_failed"
    code = "frame_auth_failed"


def check_key(key: bytes) -> None:
    """Refuse anything but 32 raw key bytes (a configuration error, never untrusted input)."""
    if not isinstance(key, bytes | bytearray) or len(key) != KEY_BYTES:
        raise ValueError("a GRID frame key is exactly 32 bytes")


def seal(key: bytes, plaintext: bytes, nonce: bytes | None = None) -> bytes:
    """Encrypt ``plaintext`` into one GRID frame under ``key`` (a random nonce unless given)."""
    check_key(key)
    if nonce is None:
        nonce = secrets.token_bytes(NONCE_BYTES)
    if len(nonce) != NONCE_BYTES:
        raise ValueError("a GRID frame nonce is exactly 12 bytes")
    sealed = AESGCM(bytes(key)).encrypt(bytes(nonce), plaintext, None)
    return MAGIC + bytes((VERSION,)) + bytes(nonce) + sealed


def unseal(keys: Sequence[bytes], packet: bytes) -> bytes:
    """Authenticate and decrypt one frame with the first key that fits.

    Raises a `FrameError` subclass naming the reason; nothing about the packet
    beyond that reason is put in the error.
    """
    if len(packet) < OVERHEAD_BYTES:
        raise FrameTooShort("packet shorter than a GRID frame")
    if packet[: len(MAGIC)] != MAGIC:
        raise FrameBadMagic("packet does not start with the GRID magic")
    if packet[len(MAGIC)] != VERSION:
        raise FrameUnknownVersion("unknown GRID frame version")
    nonce = bytes(packet[len(MAGIC) + 1 : HEADER_BYTES])
    body = bytes(packet[HEADER_BYTES:])
    for key in keys:
        check_key(key)
        try:
            return AESGCM(bytes(key)).decrypt(nonce, body, None)
        except InvalidTag:
            continue
    raise FrameAuthFailed("no accepted key authenticates the packet")


@dataclass(slots=True)
class FrameCounters:
    """Dropped packets per reason, for callers that drop silently.

    The label set is the closed enum `FRAME_REASONS`; nothing else about a
    dropped packet is recorded.
    """

    dropped: dict[FrameReason, int] = field(default_factory=lambda: dict.fromkeys(FRAME_REASONS, 0))

    def record(self, error: FrameError) -> None:
        """Count one dropped packet under its reason."""
        self.dropped[error.reason] += 1

    @property
    def total(self) -> int:
        """All dropped packets."""
        return sum(self.dropped.values())
