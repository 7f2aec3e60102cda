"""An in-process gateway in front of a hostile, recording provider, and a raw HTTP client.

`Provider` answers every method and path and records what reached it (method,
raw path, headers), so a test sees exactly what the gateway forwarded. Its
``answer`` decides the reply; the default is a small JSON answer with usage.
`raw_request` speaks HTTP/1.1 on a plain socket, so the request target is sent
exactly as written (an HTTP client library would normalise ``..`` first).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiohttp import web

from grid.gateway.config import load_config
from grid.gateway.server import Gateway
from grid.gateway.settings import GatewaySettings
from grid.testing.gateway import MODEL, Upstream, candidate, overlay, render_praxis

TOKEN = "sk-provider-secret-4242"
CREDENTIAL = {
    "strategy": "bearer_token",
    "secretRef": {"name": "provider-token", "namespace": "grid-system", "key": "token"},
}

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def usage_answer(_request: web.Request) -> web.StreamResponse:
    return web.json_response({"usage": {"prompt_tokens": 7, "completion_tokens": 3}})


@dataclass
class Seen:
    method: str
    raw_path: str
    headers: dict[str, str]


@dataclass
class Provider:
    """A provider that records every request and answers with ``answer``."""

    answer: Answer = usage_answer
    seen: list[Seen] = field(default_factory=list)
    runner: web.AppRunner | None = None
    port: int = 0

    async def start(self) -> Provider:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self.runner.addresses[0][1])
        return self

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(Seen(request.method, request.raw_path, dict(request.headers)))
        await request.read()
        return await self.answer(request)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@dataclass
class Rig:
    gateway: Gateway
    provider: Provider
    public: str

    @property
    def port(self) -> int:
        return int(self.public.rsplit(":", 1)[1])


@asynccontextmanager
async def edge_rig(tmp: Path, answer: Answer = usage_answer, **settings: Any) -> AsyncIterator[Rig]:
    """A gateway whose one candidate (with a bearer credential) is ``Provider(answer)``."""
    provider = await Provider(answer).start()
    secret = tmp / "credentials" / "provider-token" / "token"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text(TOKEN + "\n")
    upstream = Upstream("c1")
    upstream.port = provider.port
    document = overlay(candidate("c1", credential=CREDENTIAL))
    rendered, public, _admin = render_praxis(document, [upstream], tmp)
    path = tmp / "praxis.yaml"
    path.write_text(rendered.text)
    base = GatewaySettings()
    gateway = Gateway(load_config(path, 1 << 20), replace(base, **settings), path)
    await gateway.start()
    try:
        yield Rig(gateway, provider, public)
    finally:
        await gateway.stop()
        await provider.stop()


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


async def raw_request(
    port: int, method: str, target: str, body: bytes = b"", headers: str = ""
) -> tuple[int, bytes]:
    """One HTTP/1.1 request with the target sent byte for byte; (status, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = (
            f"{method} {target} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n{headers}\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10.0)
    finally:
        writer.close()
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2]
