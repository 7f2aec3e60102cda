"""Client traffic through the demo's gateways: ``grid demo --traffic R``.

R requests a second, spread over every site's gateway in turn, half of them
streaming. Each carries an ``x-grid-session`` from a small pool, so sessions
stick to their candidate while new ones follow the ranking. Most ask for the
self-hosted model; some for the API provider's, which the gateway sends with
the mounted credential. The gateways authenticate clients by API key (§15):
requests carry, in turn, each demo tenant's key (demo.json's ``api_keys``) as
``Authorization: Bearer``, with prompts of a few thousand tokens so acme's small
cap runs out within a minute; once it has, acme's requests get 429
``budget_exhausted`` while globex's carry on.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Mapping

import aiohttp

DEFAULT_RATE = 2.0
"""Requests per second when ``--traffic`` is not given: gentle on a laptop."""
IN_FLIGHT_MAX = 64
"""Requests outstanding at most; beyond it the generator waits rather than pile up."""
SESSIONS = 16
"""Distinct session identifiers the generated clients use."""
STREAM_SHARE = 0.5
API_SHARE = 0.1
"""Share of requests asking for the API provider's model."""
PROMPT_CHARS = 32_000
"""Prompt length in characters (about 8,000 tokens: a long chat context)."""


def _prompt(n: int) -> str:
    head = f"hello grid, request {n}. "
    return head + "context " * ((PROMPT_CHARS - len(head)) // 8)


def _body(model: str, stream: bool, n: int) -> dict[str, object]:
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": _prompt(n)}],
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


async def _one(
    session: aiohttp.ClientSession, url: str, body: dict[str, object], headers: dict[str, str]
) -> None:
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with session.post(
            url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=30)
        ) as resp:
            async for _chunk in resp.content.iter_any():
                pass


async def send_traffic(
    gateways: list[str],
    rate: float,
    models: tuple[str, str],
    keys: Mapping[str, str],
    rng: random.Random | None = None,
) -> None:
    """Send ``rate`` requests a second through ``gateways`` until cancelled, each with the
    client key of one tenant of ``keys`` (tenant → key) in turn."""
    if rate <= 0 or not gateways or not keys:
        return
    tenants = sorted(keys)
    rng = rng or random.Random()
    slots = asyncio.Semaphore(IN_FLIGHT_MAX)
    tasks: set[asyncio.Task[None]] = set()
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as session:
        n = 0
        next_at = loop.time()
        try:
            while True:
                await slots.acquire()
                gateway = gateways[n % len(gateways)]
                model = models[1] if rng.random() < API_SHARE else models[0]
                body = _body(model, rng.random() < STREAM_SHARE, n)
                headers = {"x-grid-session": f"demo-{rng.randrange(SESSIONS)}"}
                # Tenants turn per round of gateways, so every gateway sees every tenant.
                tenant = tenants[(n // len(gateways)) % len(tenants)]
                headers["Authorization"] = f"Bearer {keys[tenant]}"
                task = asyncio.create_task(
                    _one(session, f"http://{gateway}/v1/chat/completions", body, headers)
                )
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                task.add_done_callback(lambda _t: slots.release())
                n += 1
                next_at += 1.0 / rate
                await asyncio.sleep(max(0.0, next_at - loop.time()))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
