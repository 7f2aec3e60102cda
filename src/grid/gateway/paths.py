"""The request target a client may route: normalised, and always under ``/v1/``.

A client's path is percent-decoded once and its dot segments are removed
(RFC 3986 §5.2.4) before the gateway decides anything, so ``/v1/../admin`` and
``/v1/%2e%2e/admin`` both mean ``/admin`` and are refused: only a path that is
still under ``/v1/`` afterwards is routed, and the provider is sent exactly
that normalised path (re-encoded), never the client's spelling. A target that
cannot be read one way only is refused too: invalid percent-escapes or UTF-8,
a second layer of escapes (``%252e``, so any escaped ``%``), a backslash, a control character, or a
fragment. The query is kept as sent; it cannot change the path.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

PREFIX = "/v1/"
"""Every routed path starts with this, after normalisation."""

_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_PLAIN = re.compile(r"/v1/[A-Za-z0-9_~/-]*")
"""A path the normalisation leaves as it is (no escape, no dot, only characters sent
as they are): the common ``/v1/chat/completions`` skips decoding and re-encoding."""
_SAFE = "/:@!$&'()*+,;=-._~"
"""Characters of a path segment sent as they are (RFC 3986 pchar, plus the slash)."""


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 for an absolute path: ``.`` and ``..`` resolved, never above ``/``."""
    out: list[str] = []
    segments = path.split("/")[1:]
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == ".":
            if last:
                out.append("")
            continue
        if segment == "..":
            if out:
                out.pop()
            if last:
                out.append("")
            continue
        out.append(segment)
    return "/" + "/".join(out)


def _decoded(raw: str) -> str | None:
    """The path percent-decoded once, or None when it cannot be read one way only."""
    if _STRAY_PERCENT.search(raw) or "\\" in raw or "#" in raw:
        return None
    try:
        path = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return None
    if "%" in path or "\\" in path:
        return None  # a second layer of escapes (or an escaped percent), an escaped backslash
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return None
    return path


def routable_target(raw_target: str) -> str | None:
    """The normalised, re-encoded ``path?query`` to send on, or None (not routable).

    ``raw_target`` is the request target as the client sent it (origin form).
    """
    raw_path, mark, query = raw_target.partition("?")
    if _PLAIN.fullmatch(raw_path):
        encoded = raw_path
    else:
        if not raw_path.startswith("/"):
            return None
        path = _decoded(raw_path)
        if path is None:
            return None
        path = remove_dot_segments(path)
        if not path.startswith(PREFIX):
            return None
        encoded = quote(path, safe=_SAFE)
    if query and (any(ord(c) < 0x21 or ord(c) == 0x7F for c in query) or "#" in query):
        return None
    return encoded + mark + query
