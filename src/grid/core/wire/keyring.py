"""The SWIM keyring: one primary key for sending, up to two more accepted on receipt.

Keys rotate without a flag day (SPEC-DECISIONS §3): install the new key as an
accepted key everywhere, then make it primary everywhere, then retire the old
one. There is no plaintext mode when a key is configured. A keyring never shows
its key bytes in ``repr`` or in errors.
"""

from __future__ import annotations

from collections.abc import Sequence

from grid.core.wire.frame import (
    FrameCounters,
    FrameError,
    check_key,
    seal,
    unseal,
)

ACCEPTED_KEYS_MAX = 2
"""Keys accepted on receipt besides the primary; two cover an overlapping rotation."""


class Keyring:
    """An immutable set of 32-byte AES-256-GCM keys, primary first."""

    __slots__ = ("_keys",)

    def __init__(self, primary: bytes, accepted: Sequence[bytes] = ()) -> None:
        check_key(primary)
        extra: list[bytes] = []
        for key in accepted:
            check_key(key)
            if bytes(key) != bytes(primary) and bytes(key) not in extra:
                extra.append(bytes(key))
        if len(extra) > ACCEPTED_KEYS_MAX:
            raise ValueError(
                f"a keyring accepts at most {ACCEPTED_KEYS_MAX} keys besides the primary"
            )
        self._keys: tuple[bytes, ...] = (bytes(primary), *extra)

    def __repr__(self) -> str:
        return f"Keyring(keys={len(self._keys)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Keyring) and other._keys == self._keys

    def __hash__(self) -> int:
        return hash(self._keys)

    @property
    def primary(self) -> bytes:
        """The key every outgoing frame is sealed with."""
        return self._keys[0]

    @property
    def keys(self) -> tuple[bytes, ...]:
        """Every key accepted on receipt, primary first."""
        return self._keys

    def rotate(self, new_primary: bytes) -> Keyring:
        """Make ``new_primary`` primary; the old primary stays accepted, the oldest drops."""
        previous = [k for k in self._keys if k != bytes(new_primary)]
        return Keyring(new_primary, previous[:ACCEPTED_KEYS_MAX])

    def seal(self, plaintext: bytes, nonce: bytes | None = None) -> bytes:
        """Seal with the primary key (a random nonce unless given)."""
        return seal(self.primary, plaintext, nonce)

    def unseal(self, packet: bytes) -> bytes:
        """Open a frame with any accepted key; raises `FrameError`."""
        return unseal(self._keys, packet)

    def open_or_drop(self, packet: bytes, counters: FrameCounters) -> bytes | None:
        """Open a frame, or count its reason and return ``None`` (a silent drop)."""
        try:
            return unseal(self._keys, packet)
        except FrameError as exc:
            counters.record(exc)
            return None
