"""Synthetic client load for the demo: bursts of chat completions at mock providers.

The load changes over time (a slow cycle of quiet and busy phases), so queue
depth, KV-cache use and latency move for real and the ranked candidates change.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time

import aiohttp

BURST_PERIOD_S = 24.0
"""Seconds per quiet/busy cycle of the generated load."""
CONCURRENCY_MAX = 12
"""Most requests in flight at one provider at the peak of a cycle."""


async def _one(session: aiohttp.ClientSession, url: str, model: str) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "hello grid"}]}
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=10)) as r:
            await r.read()


async def drive(ports: list[int], model: str, rng: random.Random | None = None) -> None:
    """Send load to each provider until cancelled; each gets its own phase."""
    rng = rng or random.Random()
    phases = {port: rng.uniform(0, 2 * math.pi) for port in ports}
    async with aiohttp.ClientSession() as session:
        while True:
            now = time.monotonic()
            tasks = []
            for port in ports:
                wave = 0.5 + 0.5 * math.sin(2 * math.pi * now / BURST_PERIOD_S + phases[port])
                count = round(wave * CONCURRENCY_MAX)
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                tasks += [_one(session, url, model) for _ in range(count)]
            await asyncio.gather(*tasks)
            await asyncio.sleep(0.25)
