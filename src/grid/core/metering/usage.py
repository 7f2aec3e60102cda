"""Token usage of an OpenAI-compatible answer, as the gateway meters it (§12).

A JSON answer carries ``usage {prompt_tokens, completion_tokens}``. A stream
carries it in its final chunk (``choices: []`` and a ``usage`` object), which a
provider sends only when the request asked with ``stream_options.include_usage``.
The gateway asks when the client did not (`ask_for_usage`) and then removes
that extra chunk from what the client receives (`StreamUsage`), so the client
sees the stream it asked for.

`StreamUsage` splits the byte stream into Server-Sent Events as they arrive and
forwards each complete event at once, so relaying stays chunk by chunk. An
event longer than ``event_max_bytes`` stops the inspection: from then on bytes
pass through untouched (and that answer's usage may go unmetered), so a hostile
provider cannot make the gateway buffer without bound.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

TOKENS_MAX = 2**40
"""A usage count above this is not believed (a defence against a broken provider)."""

EVENT_MAX_BYTES = 1024 * 1024
"""The longest Server-Sent Event the gateway inspects; longer ones pass through."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one answer used."""

    prompt_tokens: int
    completion_tokens: int


def usage_of(document: object) -> Usage | None:
    """The ``usage`` of an answer or a chunk, when it holds two sane counts."""
    if not isinstance(document, dict):
        return None
    usage = document.get("usage")
    if not isinstance(usage, dict):
        return None
    counts = [usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)]
    for count in counts:
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= TOKENS_MAX:
            return None
    return Usage(counts[0], counts[1])


_DECODER = json.JSONDecoder()


def answer_usage(body: bytes) -> Usage | None:
    """The top-level ``usage`` of a JSON answer, read without decoding the whole body.

    Providers put ``usage`` last, so only the object after its last ``"usage":`` is
    decoded; when that is not the answer's own (a nested key, a string), the whole
    body is decoded instead.
    """
    at = body.rfind(b'"usage"')
    if at < 0:
        return None
    try:
        rest = body[at + len(b'"usage"') :].decode().lstrip()
        if rest.startswith(":"):
            rest = rest[1:].lstrip()
            value, end = _DECODER.raw_decode(rest)
            if rest[end:].strip() == "}":
                return usage_of({"usage": value})
        return usage_of(json.loads(body))
    except (ValueError, RecursionError):
        return None


def stream_refusal(request: dict[str, Any]) -> str | None:
    """Why a request's streaming fields cannot be metered exactly, or None when they can.

    ``stream`` must be a boolean (or null), and ``stream_options`` an object (or
    null): a provider that coerces ``"true"`` or ``1`` to true, as vLLM's models
    do, would otherwise stream without the usage chunk the gateway asks for.
    """
    stream = request.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return "'stream' must be true or false"
    options = request.get("stream_options")
    if options is not None and not isinstance(options, dict):
        return "'stream_options' must be an object"
    return None


def decoded_body(body: bytes, encoding: str, max_bytes: int) -> bytes:
    """The answer body as metering reads it: gzip and deflate unpacked (to ``max_bytes``).

    The gateway asks providers for ``identity``; one that compresses anyway is
    still metered. Another encoding, or a body that does not unpack, is read as is.
    """
    if encoding in ("gzip", "x-gzip", "deflate"):
        try:  # 32 + 15: a gzip or a zlib header, detected
            return zlib.decompressobj(47).decompress(body, max_bytes)
        except zlib.error:
            return body
    return body


def ask_for_usage(request: dict[str, Any]) -> bool:
    """Make a streaming request ask for the usage chunk; True when the gateway added it.

    ``request`` is the decoded JSON body and is changed in place. A request
    that is not a stream, or already asks, is left alone.
    """
    if request.get("stream") is not True:
        return False
    options = request.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return False
    if options is not None and not isinstance(options, dict):
        return False  # not ours to repair; the provider answers it
    request["stream_options"] = {**(options or {}), "include_usage": True}
    return True


class StreamUsage:
    """Reads the usage out of an event stream; drops the usage chunk when the gateway asked."""

    def __init__(self, strip: bool, event_max_bytes: int = EVENT_MAX_BYTES) -> None:
        self.strip = strip
        self.event_max_bytes = event_max_bytes
        self.usage: Usage | None = None
        self._pending = b""
        self._passthrough = False

    def feed(self, chunk: bytes) -> bytes:
        """The bytes of ``chunk`` to forward now (complete events; never the usage chunk)."""
        if self._passthrough:
            return chunk
        data = self._pending + chunk
        out = []
        start = 0
        while True:
            end, sep = _event_end(data, start)
            if end < 0:
                break
            event = data[start : end + sep]
            if not self._consume(data[start:end]):
                out.append(event)
            start = end + sep
        self._pending = data[start:]
        if len(self._pending) > self.event_max_bytes:
            self._passthrough = True
            out.append(self._pending)
            self._pending = b""
        return b"".join(out)

    def finish(self) -> bytes:
        """Whatever is left when the stream ended (an unterminated last event)."""
        rest, self._pending = self._pending, b""
        if rest and not self._passthrough and self._consume(rest):
            return b""
        return rest

    def _consume(self, event: bytes) -> bool:
        """Record a usage chunk's usage; True when the event is to be dropped."""
        payload = _data_of(event)
        if payload is None or b'"usage"' not in payload:
            return False
        try:
            document = json.loads(payload)
        except (ValueError, RecursionError):
            return False
        usage = usage_of(document)
        if usage is None:
            return False
        self.usage = usage
        return self.strip and isinstance(document, dict) and document.get("choices") == []


def _event_end(data: bytes, start: int) -> tuple[int, int]:
    """(index of the blank line ending the next event, separator length), or (-1, 0)."""
    candidates = [
        (i, len(sep)) for sep in (b"\n\n", b"\r\n\r\n") if (i := data.find(sep, start)) >= 0
    ]
    return min(candidates) if candidates else (-1, 0)


def _data_of(event: bytes) -> bytes | None:
    """The joined ``data:`` lines of one event, or None when it has none."""
    lines = [
        line[5:].removeprefix(b" ")
        for line in event.replace(b"\r\n", b"\n").split(b"\n")
        if line.startswith(b"data:")
    ]
    return b"\n".join(lines) if lines else None
