"""The OS nonce source for GRID frames.

`grid.core.wire.frame` never draws OS randomness itself; it takes nonces from an
installed `NonceSource`. This module is that source in production: 96-bit
nonces from the operating system's CSPRNG, which keeps the AES-GCM nonce
collision probability negligible for any realistic number of frames per key.
"""

from __future__ import annotations

import os

from grid.core.wire import frame


def os_nonce(size: int, /) -> bytes:
    """``size`` bytes from the OS CSPRNG."""
    return os.urandom(size)


def install() -> None:
    """Install `os_nonce` as the frame's nonce source."""
    frame.install_nonce_source(os_nonce)
