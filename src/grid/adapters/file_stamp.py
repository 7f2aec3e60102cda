"""A file's identity for cheap change checks: inode, size and modification time.

The gateway re-reads a file (its config, overlay, keys, budget view and
credentials) only when its stamp moved. An atomic rename gives a new inode, an
in-place rewrite a new size or mtime, so comparing stamps catches both without
reading the file.
"""

from __future__ import annotations

import os

FileStamp = tuple[int, int, int]
"""(inode, size, mtime in nanoseconds)."""


def file_stamp(path: str | os.PathLike[str] | None) -> FileStamp | None:
    """The stamp of ``path``, or None when there is no path or it cannot be stat'ed."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
