"""The gateway's tool and agent routes (SPEC-DECISIONS §16): ``/mcp`` and ``/a2a/{agent}``.

``POST /mcp`` (the path is ``GatewaySettings.mcp_path``, ``--mcp-path``) speaks
MCP streamable HTTP to the client, one JSON-RPC message per request.
``initialize`` (the handshake era, 2025-06-18; a ``server/discover`` probe is
answered "method not found", so the SDK's client falls back to it),
``ping`` and notifications are answered here. ``tools/list`` answers the union of
the snapshot's ``mcp_tool`` candidates, each with the definition its first
candidate's provider lists (name only when that provider cannot be read).
``tools/call`` is relayed as sent to the provider the selection picks for the
tool, at ``/mcp`` of its cluster, with its credential injected and §11's
failover before the first byte; an event-stream answer passes through chunk by
chunk. Toward each provider the gateway holds its own MCP session (initialized
once, again when the provider forgets it). A call of a tool no candidate serves,
a malformed message or an unreachable provider is a JSON-RPC error, never a
traceback.

``/a2a/{agent}/...`` relays any method to the selected ``a2a_agent`` candidate's
cluster under ``/...``, as the proxy relays a model request; an event-stream answer
(``SendStreamingMessage``) passes through chunk by chunk. The agent card is the one
answer changed on its way: its interface URLs are pointed back at the gateway
(`grid.gateway.agent_card`), so an SDK client's later calls come through here too.

Both go through the client's identity and budget check first (§15, §12), are planned
as a model request is (`grid.gateway.plan.plan_call`: attempts in selection order, their
headers, credential references and failover rule) and carried out by the `Proxy`; every
relayed tool call and agent request (cards aside) is counted for its tenant
(``grid_gateway_tenant_calls_total``, `grid.gateway.metering`): calls carry no tokens.
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from grid import __version__
from grid.core.vocabulary import CandidateKind
from grid.gateway.agent_card import CARD_PATHS, CardRefused, read_card, rewrite_card
from grid.gateway.plan import UNREACHABLE, Attempt, Plan, Refusal, plan_call
from grid.gateway.snapshot import Candidate

if TYPE_CHECKING:
    from grid.gateway.proxy import Answered, Proxy

MCP_PATH = "/mcp"
"""Where a tool provider's cluster serves MCP (the SDK's default path), and where the
gateway serves it unless ``GatewaySettings.mcp_path`` says otherwise."""
AGENT_PREFIX = "/a2a"
"""The gateway's agent routes: ``/a2a/{agent}/...``."""
TOOL_KIND = CandidateKind.MCP_TOOL
AGENT_KIND = CandidateKind.A2A_AGENT
HANDSHAKE_VERSION = "2025-06-18"
"""The MCP protocol version the gateway speaks to clients and providers."""
SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
ACCEPT = "application/json, text/event-stream"
TOOLS_TTL_S = 30.0
"""How long a provider's tools/list answer is reused for ``tools/list``."""
LIST_BYTES_MAX = 8 * 1024 * 1024
"""Most bytes read of a provider's tools/list answer."""

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32603,
)
_MCP_HEADERS = {
    "Accept": ACCEPT,
    "Content-Type": "application/json",
    VERSION_HEADER: HANDSHAKE_VERSION,
}
"""What every message to a tool provider carries, whatever the client sent."""
NO_TOOL = Refusal(404, "no_candidate", "no candidate serves this tool", "no_candidate")
"""Counted as the proxy counts it; the client reads a JSON-RPC error instead."""
NO_AGENT = Refusal(
    404, "no_candidate", "no candidate admits new requests for this agent", "no_candidate"
)
NOT_PLAIN = Refusal(404, "not_found", "an agent path is plain segments only", "not_found")
CARD_BROKE_OFF = Refusal(
    502, "upstream_unavailable", "the agent's card broke off", "upstream_unavailable"
)
_TAIL = re.compile(r"^(/[A-Za-z0-9._~-]+)*/?$")
"""An agent path the gateway relays: plain segments only (no escapes, no dot segments)."""


def rpc_error(ident: object, code: int, message: str, status: int = 200) -> web.Response:
    """A JSON-RPC error answer."""
    body = {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}
    return web.json_response(body, status=status)


def rpc_result(ident: object, result: dict[str, Any]) -> web.Response:
    """A JSON-RPC result answer."""
    return web.json_response({"jsonrpc": "2.0", "id": ident, "result": result})


def first_message(body: bytes, ident: object) -> dict[str, Any] | None:
    """The JSON-RPC answer with ``ident`` in a JSON or event-stream body, or None."""
    texts = [body.decode("utf-8", "replace")]
    if not texts[0].lstrip().startswith("{"):
        texts = [line[5:].strip() for line in texts[0].splitlines() if line.startswith("data:")]
    for text in texts:
        try:
            message = json.loads(text)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("id") == ident:
            return message
    return None


class AgentRoutes:
    """``/mcp`` and ``/a2a/{agent}`` over one `Proxy`'s snapshot, router and upstreams."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self._sessions: dict[str, str | None] = {}
        """Per cluster: the gateway's MCP session with it (None: the provider keeps none)."""
        self._tools: dict[str, tuple[float, dict[str, dict[str, Any]]]] = {}

    def mount(self, app: web.Application) -> None:
        """Add the routes (before the proxy's catch-all)."""
        served = self.proxy.settings.mcp_path
        app.router.add_post(served, self.mcp)
        app.router.add_route("*", served, self._no_stream)
        app.router.add_route("*", AGENT_PREFIX + "/{agent}{tail:(/.*)?}", self.agent)

    async def _no_stream(self, _request: web.Request) -> web.Response:
        return web.Response(status=405, headers={"Allow": "POST"})

    async def _admit(self, request: web.Request) -> tuple[str | None, bytes] | web.Response:
        """The tenant and the body, or the refusal: the proxy's own admission."""
        return await self.proxy.admit(request)

    # -- /mcp ------------------------------------------------------------------

    async def mcp(self, request: web.Request) -> web.StreamResponse:
        """One MCP message from a client."""
        admitted = await self._admit(request)
        if isinstance(admitted, web.Response):
            return admitted
        tenant, body = admitted
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            return rpc_error(None, PARSE_ERROR, "the body is not JSON", status=400)
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return rpc_error(None, INVALID_REQUEST, "one JSON-RPC 2.0 message per request", 400)
        method, ident = message.get("method"), message.get("id")
        if "id" not in message:
            return web.Response(status=202)  # a notification (or a client's answer)
        if method == "initialize":
            return rpc_result(ident, self._initialized(message.get("params")))
        if method == "ping":
            return rpc_result(ident, {})
        if method == "tools/list":
            return rpc_result(ident, {"tools": await self._tool_list(request)})
        if method == "tools/call":
            return await self._call(request, message, body, tenant)
        return rpc_error(ident, METHOD_NOT_FOUND, "method not found")

    @staticmethod
    def _initialized(_params: object) -> dict[str, Any]:
        return {
            "protocolVersion": HANDSHAKE_VERSION,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "grid-gateway", "version": __version__},
        }

    async def _call(
        self, request: web.Request, message: dict[str, Any], body: bytes, tenant: str | None
    ) -> web.StreamResponse:
        ident = message["id"]
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(name, str) or not name:
            return rpc_error(ident, INVALID_PARAMS, "tools/call needs params.name")
        proxy = self.proxy
        plan = self._plan(request, MCP_PATH, body, name, TOOL_KIND, drop=(SESSION_HEADER,))
        if isinstance(plan, Refusal):
            proxy.metrics.requests[plan.outcome].inc()
            return rpc_error(ident, INVALID_PARAMS, f"unknown tool: {name[:128]}")
        answered = await self._first_answer(request, plan)
        if answered is None:
            proxy.metrics.requests["upstream_unavailable"].inc()
            return rpc_error(ident, INTERNAL, "no provider of the tool could be reached")
        attempt, answer = answered
        proxy.meter.add_call(proxy.meter.label(tenant), attempt.candidate.cluster, TOOL_KIND)
        return await proxy.relay(request, plan, attempt, answer, tenant)

    def _plan(
        self,
        request: web.Request,
        target: str,
        body: bytes,
        name: str,
        kind: str,
        drop: tuple[str, ...] = (),
    ) -> Plan | Refusal:
        """The plan of one tool call (``kind`` `TOOL_KIND`) or agent request for ``name``
        over the selected candidates (`grid.gateway.plan.plan_call`)."""
        proxy = self.proxy
        snapshot = proxy.snapshot()
        tries = proxy.router.attempts(snapshot, name, None, kind=kind)
        tool = kind == TOOL_KIND
        return plan_call(
            request.headers, target, body, name, tries, proxy.rules, proxy.request_id(),
            snapshot.revision, unserved=NO_TOOL if tool else NO_AGENT, drop=drop,
            extra=_MCP_HEADERS if tool else None,
        )  # fmt: skip

    async def _first_answer(
        self, request: web.Request, plan: Plan
    ) -> tuple[Attempt, Answered] | None:
        """The first attempt's answer that can be relayed (failover before the first
        byte), each sent in the gateway's MCP session with its cluster; a provider that
        forgot the session is initialized again once."""
        proxy = self.proxy
        last = len(plan.attempts) - 1
        for planned in plan.attempts:
            candidate = planned.candidate
            for fresh in (False, True):
                session = await self._session(candidate, renew=fresh)
                if session is False:
                    break
                attempt = planned
                if isinstance(session, str):
                    attempt = planned.with_header(SESSION_HEADER, session)
                answered = await proxy.send(request, attempt, plan, last)
                if answered is None:
                    break
                stale = answered.status == 404 and isinstance(session, str) and not fresh
                if stale and answered.response is not None:
                    answered.response.release()
                    proxy.router.ended(candidate)
                    continue
                return attempt, answered
            if planned.index < last:
                proxy.metrics.failovers.inc()
        return None

    async def _session(self, candidate: Candidate, *, renew: bool = False) -> str | bool | None:
        """The gateway's MCP session with the candidate's cluster (None: sessionless),
        initialized when missing or ``renew``; False when it cannot be had."""
        cluster = candidate.cluster
        if not renew and cluster in self._sessions:
            return self._sessions[cluster]
        self._sessions.pop(cluster, None)
        hello = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": HANDSHAKE_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "grid-gateway", "version": __version__},
            },
        }
        answered = await self._post(candidate, hello, None)
        if answered is None:
            return False
        session = answered[0]
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        if await self._post(candidate, done, session, expect=None) is None:
            return False
        self._sessions[cluster] = session
        return session

    async def _post(
        self,
        candidate: Candidate,
        message: dict[str, Any],
        session: str | None,
        expect: object = 0,
    ) -> tuple[str | None, dict[str, Any] | None] | None:
        """POST one message of the gateway's own to the candidate's cluster: the session
        header it answered with and the answer to ``expect`` (an id), or None."""
        proxy = self.proxy
        upstream = proxy.upstreams.get(candidate.cluster)
        credential = proxy.credential(candidate)
        if upstream is None or credential is False:
            return None
        headers = dict(_MCP_HEADERS)
        if isinstance(credential, tuple):
            headers[credential[0]] = credential[1]
        if session is not None:
            headers[SESSION_HEADER] = session
        try:
            async with upstream.open().post(
                upstream.next_base() + MCP_PATH,
                data=json.dumps(message).encode(),
                headers=headers,
                server_hostname=upstream.server_hostname,
                allow_redirects=False,
            ) as response:
                if response.status >= 300:
                    return None
                given = response.headers.get(SESSION_HEADER) or session
                if expect is None:
                    return given, None
                data = await response.content.read(LIST_BYTES_MAX + 1)
                if len(data) > LIST_BYTES_MAX:
                    return None
                return given, first_message(data, expect)
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None

    async def _tool_list(self, _request: web.Request) -> list[dict[str, Any]]:
        """Every tool of the snapshot, defined as its first candidate's provider lists it."""
        proxy = self.proxy
        snapshot = proxy.snapshot()
        firsts: dict[str, Candidate] = {}
        for candidate in snapshot.candidates:  # in overlay order: the best ranked first
            if candidate.kind == TOOL_KIND:
                firsts.setdefault(candidate.name, candidate)
        listed: list[dict[str, Any]] = []
        for name, candidate in firsts.items():
            found = await self._definitions(candidate)
            listed.append(found.get(name) or {"name": name, "inputSchema": {"type": "object"}})
        return listed

    async def _definitions(self, candidate: Candidate) -> dict[str, dict[str, Any]]:
        """The tools the candidate's provider lists, by name (cached `TOOLS_TTL_S`)."""
        cluster = candidate.cluster
        cached = self._tools.get(cluster)
        now = time.monotonic()
        if cached is not None and now - cached[0] < TOOLS_TTL_S:
            return cached[1]
        found: dict[str, dict[str, Any]] = {}
        session = await self._session(candidate)
        if session is not False:
            message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            own = session if isinstance(session, str) else None
            answer = await self._post(candidate, message, own, expect=1)
            result = (answer[1] or {}).get("result") if answer is not None else None
            tools = result.get("tools") if isinstance(result, dict) else None
            for tool in tools if isinstance(tools, list) else []:
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    found[tool["name"]] = tool
        self._tools[cluster] = (now, found)
        return found

    # -- /a2a/{agent} ----------------------------------------------------------

    async def agent(self, request: web.Request) -> web.StreamResponse:
        """Relay one request to the selected ``a2a_agent`` candidate of ``{agent}``;
        an agent card is read and pointed back at the gateway (`grid.gateway.agent_card`)."""
        name = request.match_info["agent"]
        tail = request.match_info.get("tail") or "/"
        proxy = self.proxy
        if not _TAIL.match(tail) or "%" in request.raw_path.split("?", 1)[0]:
            return proxy.refuse(NOT_PLAIN)
        admitted = await self._admit(request)
        if isinstance(admitted, web.Response):
            return admitted
        tenant, body = admitted
        target = tail + (f"?{request.query_string}" if request.query_string else "")
        card = request.method == "GET" and tail in CARD_PATHS
        # A card is always read whole to rewrite, never a 304 for the agent's own.
        drop = ("If-None-Match",) if card else ()
        plan = self._plan(request, target, body, name, AGENT_KIND, drop)
        if isinstance(plan, Refusal):
            return proxy.refuse(plan)
        answered = await proxy.first_answer(request, plan)
        if answered is None:
            return proxy.refuse(UNREACHABLE)
        attempt, answer = answered
        response = answer.response
        if card and response is not None and response.status == 200:
            try:
                return await self._card(request, name, response)
            finally:
                proxy.router.ended(attempt.candidate)
        if not card:
            proxy.meter.add_call(proxy.meter.label(tenant), attempt.candidate.cluster, AGENT_KIND)
        return await proxy.relay(request, plan, attempt, answer, tenant)

    async def _card(
        self, request: web.Request, name: str, answer: aiohttp.ClientResponse
    ) -> web.Response:
        """The agent's card with its interfaces under the gateway's ``/a2a/{name}``."""
        proxy = self.proxy
        try:
            card = await read_card(answer)
        except CardRefused as refused:
            return proxy.refuse(Refusal(502, refused.code, str(refused), UNREACHABLE.outcome))
        except (aiohttp.ClientError, TimeoutError):
            return proxy.refuse(CARD_BROKE_OFF)
        finally:
            answer.release()
        proxy.metrics.requests["routed"].inc()
        base = f"{request.scheme}://{request.host}{AGENT_PREFIX}/{name}"
        return web.json_response(rewrite_card(card, base))
