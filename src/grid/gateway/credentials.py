"""Credential values from mounted files, re-read when the file changes.

A Kubernetes Secret mounted into the gateway appears as one file per key; the
rendered config names each file (``{credentialMountBase}/{name}/{key}``). The
value is cached with the file's identity (inode, size, mtime) and re-read when
that changes, so a rotated Secret takes effect on the next request. A missing
or empty file yields ``None``: the caller fails that candidate over rather than
send an empty credential. Values never enter logs, metrics or errors.
"""

from __future__ import annotations

from grid.adapters.file_stamp import FileStamp, file_stamp

CREDENTIAL_MAX_BYTES = 16 * 1024
"""Largest credential file read; longer files count as missing (a token is far shorter)."""


class CredentialFiles:
    """Reads and caches the credential files the config names."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[FileStamp, str | None]] = {}

    def value(self, path: str) -> str | None:
        """The file's credential (whitespace-trimmed), or None when missing or empty."""
        stamp = file_stamp(path)
        if stamp is None:
            self._cache.pop(path, None)
            return None
        cached = self._cache.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        value = self._read(path)
        self._cache[path] = (stamp, value)
        return value

    @staticmethod
    def _read(path: str) -> str | None:
        try:
            with open(path, "rb") as fh:
                data = fh.read(CREDENTIAL_MAX_BYTES + 1)
        except OSError:
            return None
        if len(data) > CREDENTIAL_MAX_BYTES:
            return None
        try:
            text = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            return None
        # A header value cannot carry line breaks; such a file is unusable, not sent.
        if not text or "\n" in text or "\r" in text:
            return None
        return text
