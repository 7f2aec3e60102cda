"""Reading a request body against a deadline with a minimum rate.

A client that declares a large body and then sends a byte every few seconds
would otherwise hold its connection, and the bytes it sent, for as long as it
likes. So the body must keep up: by ``t`` seconds after the head, at least
``(t - body_grace_s) * body_min_rate_bytes_s`` bytes must have arrived, and the
whole body must be in within ``body_timeout_s``. A body that falls behind is
refused 408 ``body_timeout`` and its connection closed; one over the size
limit is 413 ``body_too_large`` as before.

Before a 413 is sent, what the client is still sending is read and dropped, up to
``DISCARD_MAX_BYTES`` and ``DISCARD_TIMEOUT_S``: closing with unread bytes in the
receive buffer makes the kernel answer with a reset, and the client would see
that instead of the refusal.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

DISCARD_MAX_BYTES = 8 * 1024 * 1024
"""The most of a refused body read and dropped before the refusal is sent."""
DISCARD_TIMEOUT_S = 2.0
"""How long a refused body is read and dropped at the most."""


class BodyTooLarge(Exception):
    """The body exceeds the size limit."""


class BodyTooSlow(Exception):
    """The body fell behind its minimum rate or its deadline."""


async def read_body(
    request: web.Request, max_bytes: int, grace_s: float, min_rate: float, timeout_s: float
) -> bytes:
    """The whole body, or `BodyTooLarge` / `BodyTooSlow`."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    hard = started + timeout_s
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise BodyTooLarge
    parts: list[bytes] = []
    received = 0
    content = request.content
    while True:
        due = min(hard, started + grace_s + received / min_rate)
        try:
            async with asyncio.timeout_at(due):
                chunk = await content.readany()
        except TimeoutError:
            raise BodyTooSlow from None
        if not chunk:
            return b"".join(parts)
        received += len(chunk)
        if received > max_bytes:
            raise BodyTooLarge
        parts.append(chunk)


async def write_within(out: web.StreamResponse, data: bytes, timeout_s: float) -> None:
    """Write to the client, or raise `TimeoutError` when it has not read it in time."""
    async with asyncio.timeout(timeout_s):
        await out.write(data)


async def discard_rest(
    request: web.Request,
    max_bytes: int = DISCARD_MAX_BYTES,
    timeout_s: float = DISCARD_TIMEOUT_S,
) -> None:
    """Read and drop the rest of a refused body, within both bounds."""
    dropped = 0
    content = request.content
    with contextlib.suppress(
        TimeoutError, ConnectionError, aiohttp.ClientError, HttpProcessingError
    ):
        async with asyncio.timeout(timeout_s):
            while dropped < max_bytes:
                chunk = await content.readany()
                if not chunk:
                    return
                dropped += len(chunk)
