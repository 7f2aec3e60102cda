"""An agent's card as the gateway hands it on: read bounded, pointed back at the gateway.

A client of ``/a2a/{agent}`` first reads the agent card at
``/a2a/{agent}/.well-known/agent-card.json`` (a2a-sdk's ``AGENT_CARD_WELL_KNOWN_PATH``;
the pre-1.0 ``/.well-known/agent.json`` too), then calls the URLs the card names. An
agent names its own address there, so the gateway rewrites every interface URL to
its own ``/a2a/{agent}`` base with the URL's path kept, and the client's calls come
back through the gateway (identity, budget, selection, failover). Rewritten are the
1.0 ``supportedInterfaces[].url``, the 0.3 top-level ``url`` and
``additionalInterfaces[].url``; an interface the gateway cannot relay (gRPC, or a
URL that is not HTTP) is dropped rather than left pointing past the gateway. The
card's ``signatures`` no longer cover what it says, so they are dropped too.

The card is outside input: it is read to at most `CARD_BYTES_MAX` bytes, decoded
with at most `CARD_DEPTH_MAX` levels of nesting, and must be a JSON object; anything
else is `CardRefused`, which the route answers 502 ``invalid_agent_card``.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from yarl import URL

from grid.core.json_document import DocumentError, decode_json
from grid.errors import ProtocolError

CARD_PATHS = frozenset({"/.well-known/agent-card.json", "/.well-known/agent.json"})
"""Agent paths whose GET answer is an agent card (1.0's and 0.3's well-known paths)."""
CARD_BYTES_MAX = 1024 * 1024
"""Most bytes of an agent card read; real cards are a few kilobytes."""
CARD_DEPTH_MAX = 32
"""Deepest JSON nesting of a card accepted (as operator discovery allows)."""
RELAYED_BINDINGS = frozenset({"JSONRPC", "HTTP+JSON"})
"""Interface bindings the gateway relays (HTTP); others are dropped from the card."""


class CardRefused(ProtocolError):
    """An agent card too large, too deep, or not a JSON object."""

    code = "invalid_agent_card"


async def read_card(response: aiohttp.ClientResponse) -> dict[str, Any]:
    """The card in ``response``'s body, bounded, or `CardRefused`."""
    if (response.content_length or 0) > CARD_BYTES_MAX:
        raise CardRefused("the agent card exceeds the size bound")
    body = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > CARD_BYTES_MAX:
            raise CardRefused("the agent card exceeds the size bound")
    try:
        card = decode_json(bytes(body), depth_max=CARD_DEPTH_MAX)
    except DocumentError:
        raise CardRefused("the agent card is not JSON within the nesting bound") from None
    if not isinstance(card, dict):
        raise CardRefused("the agent card is not a JSON object")
    return card


def rebased(url: object, base: str) -> str | None:
    """``url``'s path and query under ``base``, or None when it is not an HTTP URL."""
    if not isinstance(url, str):
        return None
    try:
        parsed = URL(url)
    except (ValueError, TypeError):
        return None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return None
    tail = parsed.raw_path or "/"
    query = f"?{parsed.raw_query_string}" if parsed.raw_query_string else ""
    return base.rstrip("/") + tail + query


def _interfaces(entries: object, base: str, binding_key: str) -> list[dict[str, Any]]:
    """The relayable interfaces of ``entries``, each with its URL rebased."""
    kept: list[dict[str, Any]] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        binding = entry.get(binding_key, "JSONRPC")
        url = rebased(entry.get("url"), base)
        if binding in RELAYED_BINDINGS and url is not None:
            kept.append({**entry, "url": url})
    return kept


def rewrite_card(card: dict[str, Any], base: str) -> dict[str, Any]:
    """The card with every interface URL under ``base`` (the gateway's agent base)."""
    out = {k: v for k, v in card.items() if k != "signatures"}
    if "supportedInterfaces" in out:
        out["supportedInterfaces"] = _interfaces(
            out["supportedInterfaces"], base, "protocolBinding"
        )
    if "additionalInterfaces" in out:
        out["additionalInterfaces"] = _interfaces(out["additionalInterfaces"], base, "transport")
    if "url" in out:
        url = rebased(out["url"], base)
        if url is None:
            out.pop("url")
        else:
            out["url"] = url
    return out
