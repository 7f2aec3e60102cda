"""A provider's error answer, relayed only once the injected credential is masked out.

A provider may echo what it received: a 401 or 503 quoting the request's
``Authorization`` would hand the gateway's credential to the client. So an
answer with an error status (400 and up) is read whole, up to
``error_body_max_bytes`` (a longer one is cut there), decoded when the
provider compressed it (gzip or deflate; another encoding is not relayed), and
every spelling of the credential is replaced by ``[redacted]``: the raw bytes,
the JSON-escaped and percent-encoded forms, and base64. A cut body also loses
a trailing start of the credential. A response header of any answer that holds
the credential is dropped.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import zlib
from collections.abc import Collection
from dataclasses import dataclass, field
from urllib.parse import quote

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, MultiMapping

MASK = b"[redacted]"

UNRELAYABLE = (
    b'{"error":{"code":"upstream_error","message":'
    b'"the cluster answered an error in an encoding the gateway does not relay"}}'
)
"""The body sent in place of an error body the gateway cannot read to mask."""

_DECODERS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def secret_of(credential: object) -> str | None:
    """The credential's secret from an injected ``(header, value)``; None without one."""
    if not isinstance(credential, tuple):
        return None
    value = str(credential[1])
    return value.removeprefix("Bearer ") or None


@functools.lru_cache(maxsize=64)
def _spellings(secret: str) -> tuple[bytes, ...]:
    """Every spelling of ``secret``, longest first (made once per credential value)."""
    raw = secret.encode()
    spellings = {
        raw,
        json.dumps(secret)[1:-1].encode(),
        quote(secret, safe="").encode(),
        base64.b64encode(raw),
        base64.urlsafe_b64encode(raw),
        base64.b64encode(raw).rstrip(b"="),
    }
    return tuple(sorted((s for s in spellings if s), key=len, reverse=True))


@dataclass(frozen=True)
class Masker:
    """Every spelling of one secret, and what masking them does to bodies and headers."""

    forms: tuple[bytes, ...]
    _any: re.Pattern[bytes] | None = field(init=False, repr=False, compare=False)
    """Finds any of `forms` in one pass (None without forms)."""

    def __post_init__(self) -> None:
        found = re.compile(b"|".join(map(re.escape, self.forms))) if self.forms else None
        object.__setattr__(self, "_any", found)

    @classmethod
    def of(cls, secret: str | None) -> Masker:
        """The masker of ``secret`` (one per credential value, made once)."""
        return _masker(secret) if secret else _NO_SECRET

    def body(self, data: bytes, cut: bool = False) -> bytes:
        """``data`` with every spelling masked; a ``cut`` body also loses a trailing prefix."""
        for form in self.forms:
            data = data.replace(form, MASK)
        if cut:
            for form in self.forms:
                for size in range(min(len(form) - 1, len(data)), 0, -1):
                    if data.endswith(form[:size]):
                        data = data[:-size] + MASK
                        break
        return data

    def headers(self, headers: MultiMapping[str], drop: Collection[str] = ()) -> CIMultiDict[str]:
        """The headers, in order and repeats kept, without any whose value holds a
        spelling of the secret, and without those named in ``drop`` (lower-case)."""
        out = CIMultiDict(headers)
        for name in drop:
            if name in out:
                del out[name]  # every value of that name
        if self._any is None:  # no secret to look for
            return out
        holds = self._any.search
        # One search over every value at once: no spelling holds a line break, so a
        # match never spans two values; only when one holds the secret are they sorted.
        if holds("\n".join(out.values()).encode()):
            out = CIMultiDict([(n, v) for n, v in out.items() if not holds(v.encode())])
        return out


_NO_SECRET = Masker(())


@functools.lru_cache(maxsize=64)
def _masker(secret: str) -> Masker:
    return Masker(_spellings(secret))


async def error_answer(
    response: aiohttp.ClientResponse, headers: MultiMapping[str], masker: Masker, limit: int
) -> web.Response:
    """The client's copy of a cluster's error answer: bounded, decoded, masked."""
    body, decoded = await _error_body(response, masker, limit)
    out = masker.headers(headers)
    if decoded:
        out.popall("Content-Encoding", None)
    if body is UNRELAYABLE:
        out["Content-Type"] = "application/json"
    return web.Response(status=response.status, body=body, headers=out)


async def _error_body(
    response: aiohttp.ClientResponse, masker: Masker, limit: int
) -> tuple[bytes, bool]:
    """The masked error body and whether it was decoded (its Content-Encoding is gone)."""
    data = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        data += chunk
        if len(data) > limit:
            break
    raw = bytes(data)
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return masker.body(raw[:limit], cut=len(raw) > limit), False
    wbits = _DECODERS.get(encoding)
    if wbits is None:
        return UNRELAYABLE, True
    try:
        inflater = zlib.decompressobj(wbits)
        plain = inflater.decompress(raw, limit + 1)
    except zlib.error:
        return UNRELAYABLE, True
    return masker.body(plain[:limit], cut=len(plain) > limit or len(raw) > limit), True
