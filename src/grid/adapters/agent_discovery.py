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

import json
import re
import ssl
from collections.abc import AsyncIterator, Mapping
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


async def list_mcp_tools(
    endpoint: str,
    headers: Mapping[str, str],
    tls: ssl.SSLContext | None,
    limits: DiscoveryLimits = DEFAULT_LIMITS,
    connections: McpConnections | None = None,
) -> list[ToolSpec]:
    """Every tool the MCP server at ``endpoint`` lists, or `DiscoveryError`.

    The caller bounds the time (``asyncio.timeout``); this bounds the bytes.
    ``connections`` is the server's kept pool (its bounds are its own); without
    one the connections close with the discovery.
    """
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    pool: httpx2.AsyncBaseTransport
    if connections is not None:
        pool = connections
    else:
        pool = _BoundedTransport(limits.body_bytes_max, tls if tls is not None else True)
    client = httpx2.AsyncClient(headers=dict(headers), transport=pool, timeout=httpx2.Timeout(30.0))
    try:
        async with client:
            transport = streamable_http_client(endpoint, http_client=client)
            async with Client(transport, cache=None) as session:
                return await _pages(session, limits)
    except DiscoveryError:
        raise
    except BaseException as exc:  # the SDK's task groups wrap failures in groups
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        if _caused_by(exc, DiscoveryError) is not None:
            raise _caused_by(exc, DiscoveryError) from None  # type: ignore[misc]
        raise _classify(exc) from None


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
