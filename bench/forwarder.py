"""A trivial aiohttp forwarder: the floor any Python HTTP proxy pays (bench/gateway.py).

It forwards every request to one upstream over a pooled keep-alive session and
relays the answer: whole for sized bodies, chunk by chunk for event streams. No
routing, no header policy, no limits. Run: ``python bench/forwarder.py LISTEN_PORT UPSTREAM``;
it binds with ``SO_REUSEPORT``, so several of them can share one port (one per core).
"""

from __future__ import annotations

import sys

import aiohttp
from aiohttp import web

DROP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


def app(upstream: str) -> web.Application:
    """The forwarding application."""
    state: dict[str, aiohttp.ClientSession] = {}

    async def forward(request: web.Request) -> web.StreamResponse:
        if "s" not in state:
            state["s"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in DROP}
        body = await request.read()
        url = f"http://{upstream}{request.path_qs}"
        async with state["s"].request(request.method, url, data=body, headers=headers) as r:
            out_headers = {k: v for k, v in r.headers.items() if k.lower() not in DROP}
            if not r.headers.get("Content-Type", "").startswith("text/event-stream"):
                return web.Response(status=r.status, body=await r.read(), headers=out_headers)
            out = web.StreamResponse(status=r.status, headers=out_headers)
            await out.prepare(request)
            async for chunk in r.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    application = web.Application(client_max_size=4 * 1024 * 1024)
    application.router.add_route("*", "/{tail:.*}", forward)
    return application


if __name__ == "__main__":
    web.run_app(
        app(sys.argv[2]), host="127.0.0.1", port=int(sys.argv[1]), print=None, reuse_port=True
    )
