"""Reading a file from a user with a size bound checked while reading.

Every CLI reader of outside files (manifests, signals documents, overlays) comes
through here. At most ``limit + 1`` bytes are read, in chunks, so a 2 GB file or
``/dev/zero`` costs no more memory than the limit, and the extra byte tells
"exactly at the limit" from "larger". Failures are one-line `UnreadableFile`
messages naming the limit or the OS error, never the file's bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

from grid.errors import GridError

READ_CHUNK_BYTES = 1024 * 1024
"""Bytes asked of the OS per read; small enough that a read past the limit is cheap."""


class UnreadableFile(GridError):
    """A file that could not be read within its size limit."""


def read_bounded(path: str | os.PathLike[str], limit_bytes: int) -> bytes:
    """The bytes of the file at ``path``, or `UnreadableFile` when it exceeds ``limit_bytes``."""
    chunks: list[bytes] = []
    total = 0
    try:
        with Path(path).open("rb") as handle:
            while total <= limit_bytes:
                chunk = handle.read(min(READ_CHUNK_BYTES, limit_bytes + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
    except OSError as exc:
        raise UnreadableFile(f"cannot read file: {exc.strerror or type(exc).__name__}") from exc
    if total > limit_bytes:
        raise UnreadableFile(f"file is larger than {limit_bytes} bytes")
    return b"".join(chunks)
