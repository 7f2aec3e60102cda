"""Reading a request body against a deadline with a minimum rate.

A client that declares a large body and then sends a byte every few seconds
would otherwise hold its connection, and the bytes it sent, for as long as it
likes. So the body must keep up: by ``t`` seconds after the head, at least
``(t - body_grace_s) * body_min_rate_bytes_s`` bytes must have arrived, and the
whole body must be in within ``body_timeout_s``. A body that falls behind is
refused 408 ``body_timeout`` and its connection closed; one over the size
limit is 413 ``body_too_large`` as before.

After a 413 the listener shuts the write side and reads and drops a bounded
part of what the client still sends (`grid.gateway.settings.LISTENER_POLICY`),
so the client reads the refusal instead of a reset.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from grid.errors import GridError


class BodyTooLarge(GridError):
    """The body exceeds the size limit."""

    code = "body_too_large"


class BodyTooSlow(GridError):
    """The body fell behind its minimum rate or its deadline."""

    code = "body_too_slow"


async def read_body(
    request: web.Request, max_bytes: int, grace_s: float, min_rate: float, timeout_s: float
) -> bytes:
    """The whole body, or `BodyTooLarge` / `BodyTooSlow`."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise BodyTooLarge
    content = request.content
    if content.is_eof():  # the whole body arrived with the head (a small one): no wait
        body = content.read_nowait()
        if len(body) > max_bytes:
            raise BodyTooLarge
        return body
    started = asyncio.get_running_loop().time()
    hard = started + timeout_s
    parts: list[bytes] = []
    received = 0
    while True:
        if content.is_eof():  # the rest is buffered already: nothing to wait for or time
            chunk = content.read_nowait()
        else:
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
