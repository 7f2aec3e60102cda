"""Discovery of tools and agents: MCP ``tools/list`` and the A2A agent card, bounded.

Tools are listed with the official ``mcp`` SDK's client over streamable HTTP; the
agent card is read from the agent's well-known path and parsed with ``a2a-sdk``'s
types. Both read outside bytes, so both are bounded while reading (SPEC-DECISIONS
§16, CONVENTIONS 12): a body over `DiscoveryLimits.body_bytes_max` is cut off
mid-stream, a card nested deeper than ``depth_max`` is refused before it is parsed,
and a listing with more than `TOOLS_MAX` tools or a name the MCP specification does
not allow is refused. Every failure is a `DiscoveryError` with a stable ``reason``
(the status reason the controller writes); nothing else escapes, and no body, header
or credential is ever part of a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx2

from grid.core.resources.agent_spec import (
    DESCRIPTION_CHARS_MAX,
    SKILLS_MAX,
    TOOL_NAME_CHARS_MAX,
    TOOL_NAME_PATTERN,
    TOOLS_MAX,
    AgentCardSpec,
    ToolSpec,
)
from grid.errors import GridError, ProtocolError

AGENT_CARD_PATH = "/.well-known/agent-card.json"
"""Where an A2A agent publishes its card (a2a-sdk's ``AGENT_CARD_WELL_KNOWN_PATH``)."""


@dataclass(frozen=True, slots=True)
class DiscoveryLimits:
    """Bounds on what one discovery may read."""

    body_bytes_max: int = 8 * 1024 * 1024
    """Most bytes of one HTTP answer (a tools/list page or the card). 1,024 tools
    with descriptions and input schemas fit with room; a 100 MB answer never does."""
    depth_max: int = 32
    """Deepest JSON nesting of an agent card; real cards nest a handful of levels."""
    tools_max: int = TOOLS_MAX
    """Most tools one server may list (an overlay holds at most 1,024 candidates)."""
    pages_max: int = 64
    """Most tools/list pages followed, so a server cannot page forever."""


DEFAULT_LIMITS = DiscoveryLimits()


class DiscoveryError(GridError):
    """A discovery that failed; ``reason`` is the status reason (CamelCase, stable)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message, code=reason)
        self.reason = reason


class _TooLarge(ProtocolError):
    """A discovery answer past its size or depth bound."""

    code = "too_large"


class _BoundedStream(httpx2.AsyncByteStream):
    """A response body that raises once more than ``limit`` bytes have arrived."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise _TooLarge
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedTransport(httpx2.AsyncBaseTransport):
    """The default transport, with every response body bounded."""

    def __init__(
        self, limit: int, verify: ssl.SSLContext | bool, keepalive_s: float | None = None
    ) -> None:
        self._inner = httpx2.AsyncHTTPTransport(
            verify=verify, limits=httpx2.Limits(keepalive_expiry=keepalive_s or 5.0)
        )
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self._limit:
            await response.aclose()
            raise _TooLarge
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_BoundedStream(stream, self._limit),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class McpConnections(httpx2.AsyncBaseTransport):
    """One MCP server's connection pool, kept across discoveries.

    Each discovery builds its own client (its credential header with it) over
    this transport; the client's end leaves the pool open, and the owner closes
    it (`close`) when the provider goes. Idle connections are kept for
    ``keepalive_s``.
    """

    def __init__(
        self,
        tls: ssl.SSLContext | None,
        keepalive_s: float,
        limits: DiscoveryLimits = DEFAULT_LIMITS,
    ) -> None:
        verify = tls if tls is not None else True
        self._inner = _BoundedTransport(limits.body_bytes_max, verify, keepalive_s)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Kept open when a discovery's client closes."""

    async def close(self) -> None:
        """Close the pooled connections."""
        await self._inner.aclose()


SESSION_MAX_S = 60.0
"""Most seconds one MCP session is kept: then the next discovery initializes a new one,
so that a server's changed capabilities or protocol version are seen within a minute."""


class McpSession:
    """One MCP server's kept session: ``initialize`` once, then one ``tools/list`` a discovery.

    A discovery in a fresh session costs four requests (``initialize``, the
    ``initialized`` notification, ``tools/list``, the closing ``DELETE``) and the
    SDK's task groups: about 7.5 ms of CPU against a loopback server, where a
    ``tools/list`` in a kept session costs 1.7 ms. The SDK's client lives in one
    task (`_serve`, its anyio scopes must open and close in the same task), which
    takes the discoveries from a queue in turn.

    A session is renewed when the credential headers change, after
    `SESSION_MAX_S`, and after any failure. A discovery that fails in a session
    that earlier ones used (the server restarted and forgot it, a kept
    connection was closed) is tried once more in a fresh session, within the
    caller's time; a failure in a fresh session is the discovery's. The caller
    bounds the time (``asyncio.timeout``): a discovery cancelled mid-way ends
    its session, whose state is then unknown.
    """

    def __init__(
        self,
        endpoint: str,
        tls: ssl.SSLContext | None,
        *,
        keepalive_s: float = 5.0,
        limits: DiscoveryLimits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic,
        max_age_s: float = SESSION_MAX_S,
    ) -> None:
        self._endpoint = endpoint
        self._limits = limits
        self._connections = McpConnections(tls, keepalive_s, limits)
        self._clock = clock
        self._max_age_s = max_age_s
        self._runner: asyncio.Task[None] | None = None
        self._requests: asyncio.Queue[asyncio.Future[list[ToolSpec]]] = asyncio.Queue()
        self._headers: dict[str, str] = {}
        self._opened_at = 0.0
        self._served = 0
        self.sessions = 0
        """Sessions opened so far (each an ``initialize``)."""

    async def list_tools(self, headers: Mapping[str, str]) -> list[ToolSpec]:
        """Every tool the server lists, or `DiscoveryError`."""
        wanted = dict(headers)
        runner = self._runner
        kept = (
            runner is not None
            and not runner.done()
            and wanted == self._headers
            and self._clock() - self._opened_at < self._max_age_s
        )
        if not kept:
            self._open(wanted)
        elif self._served > 0:
            try:
                return await self._ask()
            except DiscoveryError:
                self._open(wanted)  # a kept session failed: once more, in a fresh one
        return await self._ask()

    def _open(self, headers: dict[str, str]) -> None:
        self._end()
        self._headers, self._opened_at, self._served = headers, self._clock(), 0
        self._requests = asyncio.Queue()
        self._runner = asyncio.create_task(self._serve(headers, self._requests), name="mcp")
        self.sessions += 1

    async def _ask(self) -> list[ToolSpec]:
        future: asyncio.Future[list[ToolSpec]] = asyncio.get_running_loop().create_future()
        self._requests.put_nowait(future)
        try:
            tools = await future
        except BaseException:
            self._end()  # failed or cancelled mid-way: the session's state is unknown
            raise
        self._served += 1
        return tools

    async def _serve(
        self, headers: dict[str, str], requests: asyncio.Queue[asyncio.Future[list[ToolSpec]]]
    ) -> None:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        future: asyncio.Future[list[ToolSpec]] | None = None
        client = httpx2.AsyncClient(
            headers=headers, transport=self._connections, timeout=httpx2.Timeout(30.0)
        )
        try:
            async with client:
                transport = streamable_http_client(self._endpoint, http_client=client)
                async with Client(transport, cache=None) as session:
                    while True:
                        future = await requests.get()
                        if not future.done():  # its caller may have given up
                            future.set_result(await _pages(session, self._limits))
                        future = None
        except asyncio.CancelledError:  # ended (`_end`, `close`): nobody waits on it
            _fail([future, *_drain(requests)], DiscoveryError("Timeout", "the session ended"))
            raise
        except Exception as exc:  # the SDK's task groups wrap failures in groups
            _fail([future, *_drain(requests)], _discovery_error(exc))

    def _end(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None and not runner.done():
            runner.cancel()

    async def close(self) -> None:
        """End the session and close the kept connections."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
        await self._connections.close()


def _drain(requests: asyncio.Queue[asyncio.Future[list[ToolSpec]]]) -> list[asyncio.Future[Any]]:
    out = []
    while not requests.empty():
        out.append(requests.get_nowait())
    return out


def _fail(futures: list[asyncio.Future[Any] | None], error: DiscoveryError) -> None:
    for future in futures:
        if future is not None and not future.done():
            future.set_exception(error)


def _discovery_error(exc: BaseException) -> DiscoveryError:
    """``exc`` as the `DiscoveryError` it is or was caused by, or classified."""
    found = _caused_by(exc, DiscoveryError)
    if isinstance(found, DiscoveryError):
        return found
    return _classify(exc)


async def list_mcp_tools(
    endpoint: str,
    headers: Mapping[str, str],
    tls: ssl.SSLContext | None,
    limits: DiscoveryLimits = DEFAULT_LIMITS,
) -> list[ToolSpec]:
    """Every tool the MCP server at ``endpoint`` lists, in a session of its own, or
    `DiscoveryError`. The caller bounds the time (``asyncio.timeout``); this bounds the
    bytes."""
    session = McpSession(endpoint, tls, limits=limits)
    try:
        return await session.list_tools(headers)
    finally:
        await session.close()


async def _pages(session: Any, limits: DiscoveryLimits) -> list[ToolSpec]:
    tools: list[ToolSpec] = []
    cursor: str | None = None
    for _ in range(limits.pages_max):
        page = await session.list_tools(cursor=cursor)
        for tool in page.tools:
            tools.append(_tool(tool.name, tool.description))
            if len(tools) > limits.tools_max:
                raise DiscoveryError(
                    "TooManyTools", f"the server lists more than {limits.tools_max} tools"
                )
        cursor = page.next_cursor
        if cursor is None:
            return _unique(tools)
    raise DiscoveryError("TooManyPages", f"tools/list ran past {limits.pages_max} pages")


_NAME = re.compile(TOOL_NAME_PATTERN)


def _tool(name: object, description: object) -> ToolSpec:
    if not isinstance(name, str) or not 0 < len(name) <= TOOL_NAME_CHARS_MAX:
        raise DiscoveryError(
            "InvalidToolName", f"a tool name is empty or over {TOOL_NAME_CHARS_MAX} characters"
        )
    if not _NAME.match(name):
        raise DiscoveryError("InvalidToolName", "a tool name has characters MCP does not allow")
    text = description if isinstance(description, str) else None
    if text is not None and len(text) > DESCRIPTION_CHARS_MAX:
        text = None  # a description is decoration: an over-long one is dropped, not routed on
    return ToolSpec(name=name, description=text)


def _unique(tools: list[ToolSpec]) -> list[ToolSpec]:
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise DiscoveryError("DuplicateToolName", "the server lists a tool name twice")
    return tools


def _caused_by(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first ``kind`` in ``exc``, its exception groups and its causes."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kind):
            return current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


def _classify(exc: BaseException) -> DiscoveryError:
    """A foreign failure as a `DiscoveryError` whose message names no bytes."""
    if _caused_by(exc, _TooLarge) is not None:
        return DiscoveryError("ResponseTooLarge", "an answer exceeded the size bound")
    if _caused_by(exc, httpx2.ConnectError) is not None:
        return DiscoveryError("Unreachable", "the endpoint refused or dropped the connection")
    if _caused_by(exc, httpx2.TimeoutException) is not None:
        return DiscoveryError("Timeout", "the endpoint did not answer in time")
    status = _caused_by(exc, httpx2.HTTPStatusError)
    if isinstance(status, httpx2.HTTPStatusError):
        code = status.response.status_code
        return DiscoveryError("HttpError", f"the endpoint answered HTTP {code}")
    return DiscoveryError("InvalidJsonRpc", "the server's answer is not valid MCP JSON-RPC")


async def read_agent_card(
    session: aiohttp.ClientSession,
    endpoint: str,
    headers: Mapping[str, str],
    tls: ssl.SSLContext | None,
    limits: DiscoveryLimits = DEFAULT_LIMITS,
) -> AgentCardSpec:
    """The agent card at ``endpoint``'s well-known path, or `DiscoveryError`."""
    url = endpoint.rstrip("/") + AGENT_CARD_PATH
    try:
        async with session.get(url, headers=dict(headers), ssl=tls or True) as response:
            if response.status != 200:
                raise DiscoveryError("HttpError", f"the card answered HTTP {response.status}")
            if (response.content_length or 0) > limits.body_bytes_max:
                raise DiscoveryError("ResponseTooLarge", "the card exceeds the size bound")
            body = bytearray()
            async for chunk in response.content.iter_chunked(65536):
                body += chunk
                if len(body) > limits.body_bytes_max:
                    raise DiscoveryError("ResponseTooLarge", "the card exceeds the size bound")
    except aiohttp.ClientError:
        raise DiscoveryError("Unreachable", "the agent did not answer") from None
    return parse_card(bytes(body), limits)


def parse_card(body: bytes, limits: DiscoveryLimits = DEFAULT_LIMITS) -> AgentCardSpec:
    """An agent card's modalities and skill ids, parsed with a2a-sdk's ``AgentCard``."""
    from a2a.client.card_resolver import parse_agent_card
    from google.protobuf.json_format import ParseError

    if _depth(body) > limits.depth_max:
        raise DiscoveryError("CardTooDeep", f"the card nests deeper than {limits.depth_max}")
    try:
        data = json.loads(body)
        card = parse_agent_card(data)
    except (ValueError, ParseError, TypeError, AttributeError):
        raise DiscoveryError("InvalidAgentCard", "the card is not a valid A2A agent card") from None
    modalities = sorted({*card.default_input_modes, *card.default_output_modes})
    skills = [skill.id for skill in card.skills if skill.id]
    if len(modalities) > SKILLS_MAX or len(skills) > SKILLS_MAX:
        raise DiscoveryError("InvalidAgentCard", f"the card lists more than {SKILLS_MAX} entries")
    try:
        return AgentCardSpec(modalities=modalities, skills=skills)
    except ValueError:
        raise DiscoveryError(
            "InvalidAgentCard", "the card's skills or modalities are invalid"
        ) from None


def _depth(body: bytes) -> int:
    """The deepest bracket nesting of a JSON text, ignoring brackets inside strings."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest
