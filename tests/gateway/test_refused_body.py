"""A refused client that keeps sending still reads its 413 (issue 22.2).

The client declares a body over the limit and sends 64 MiB while it reads the
answer, as a browser or curl does. The gateway must answer 413 ``body_too_large``
and close in an order that lets the client read it: a reset that arrives first
discards the refusal from the client's receive buffer. Fifty times in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from grid.testing.edge_rig import edge_rig

SENT = 64 * 1024 * 1024
CHUNK = 256 * 1024
ROUNDS = 50


async def _oversized(port: int) -> bytes:
    """Declare and send 64 MiB, reading concurrently; everything the client read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n"
        f"Content-Type: application/json\r\nContent-Length: {SENT}\r\n\r\n"
    )
    chunk = b"x" * CHUNK

    async def send() -> None:
        with contextlib.suppress(ConnectionError):
            writer.write(head.encode())
            for _ in range(SENT // CHUNK):
                writer.write(chunk)
                await writer.drain()

    sending = asyncio.create_task(send())
    received = b""
    try:
        async with asyncio.timeout(20):
            while chunk_in := await reader.read(65536):
                received += chunk_in
    except ConnectionError:
        pass
    finally:
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending
        writer.close()
    return received


async def test_every_refused_64_mib_sender_reads_its_413(tmp_path: Path) -> None:
    async with edge_rig(tmp_path) as rig:
        answers = [await _oversized(rig.port) for _ in range(ROUNDS)]
    statuses = [a.split(b" ", 2)[1] if a.startswith(b"HTTP/1.1 ") else a[:20] for a in answers]
    assert statuses == [b"413"] * ROUNDS, [s for s in statuses if s != b"413"]
    assert all(b"body_too_large" in a for a in answers)
    assert rig.provider.seen == []
