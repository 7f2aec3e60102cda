"""A stand-in for an operator's signals listener, for gateway poll-mode tests.

It serves ``GET /v1/site/signals`` over real mTLS on 127.0.0.1 (client
certificate required), with a strong ``ETag`` and ``304`` on a matching
``If-None-Match``, as §6 fixes, and ``POST /v1/site/signals/ingest``, parsing
each report with `grid.core.signals.feedback.parse_report` and answering §7's ``204``
with the epoch and sequence echoed (or a chosen failure status). Tests set
the document it serves, make it answer an error status, and read what it saw:
requests, the ``If-None-Match`` values, the distinct connections (keep-alive),
whether each request came with a client certificate, and every report.
"""

from __future__ import annotations

import hashlib
import json
import ssl
from typing import Any

from aiohttp import web

from grid.core.signals.feedback import FeedbackRefusal, Report, echo_headers, parse_report


class SignalsOperator:
    """An mTLS ``/v1/site/signals`` server; `start` returns its ``host:port``."""

    def __init__(self, server_tls: ssl.SSLContext, document: dict[str, Any]) -> None:
        self._tls = server_tls
        self.document = document
        self.fail_status: int | None = None
        """When set, every request is answered with this status and no document."""
        self.requests = 0
        self.if_none_match: list[str | None] = []
        self.scopes: list[str | None] = []
        self.connections: set[int] = set()
        self.client_certs: list[bool] = []
        self.ingest_status: int | None = None
        """When set, every ingest POST is answered with this status and no echo."""
        self.reports: list[Report] = []
        """Every well-formed report received, acknowledged or not, in arrival order."""
        self.acknowledged: list[Report] = []
        self._runner: web.AppRunner | None = None

    def body(self) -> bytes:
        """The bytes of the current document."""
        return json.dumps(self.document, sort_keys=True).encode()

    def etag(self) -> str:
        """The strong ETag of the current document."""
        return '"' + hashlib.sha256(self.body()).hexdigest()[:32] + '"'

    async def _signals(self, request: web.Request) -> web.Response:
        self.requests += 1
        transport = request.transport
        self.connections.add(id(transport))
        peer = transport.get_extra_info("peercert") if transport is not None else None
        self.client_certs.append(bool(peer))
        self.if_none_match.append(request.headers.get("If-None-Match"))
        self.scopes.append(request.query.get("scope"))
        if self.fail_status is not None:
            return web.json_response(
                {"code": "unavailable", "message": "test"}, status=self.fail_status
            )
        etag = self.etag()
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        return web.Response(
            body=self.body(), content_type="application/json", headers={"ETag": etag}
        )

    async def _ingest(self, request: web.Request) -> web.Response:
        transport = request.transport
        peer = transport.get_extra_info("peercert") if transport is not None else None
        self.client_certs.append(bool(peer))
        if await request.read():
            return web.json_response({"code": "body_not_empty", "message": "t"}, status=413)
        try:
            report = parse_report(request.headers.items())
        except FeedbackRefusal as exc:
            return web.json_response({"code": exc.code, "message": "t"}, status=exc.status)
        self.reports.append(report)
        if self.ingest_status is not None:
            return web.json_response({"code": "test", "message": "t"}, status=self.ingest_status)
        self.acknowledged.append(report)
        return web.Response(status=204, headers=echo_headers(report))

    async def start(self) -> str:
        """Listen on a free port of 127.0.0.1; returns ``127.0.0.1:port``."""
        app = web.Application()
        app.router.add_get("/v1/site/signals", self._signals)
        app.router.add_post("/v1/site/signals/ingest", self._ingest)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._tls)
        await site.start()
        return f"127.0.0.1:{int(self._runner.addresses[0][1])}"

    async def stop(self) -> None:
        """Close the listener and its connections."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
