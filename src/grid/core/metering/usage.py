"""Token usage of an OpenAI-compatible answer, as the gateway meters it (§12).

A JSON answer carries ``usage {prompt_tokens, completion_tokens}``. A stream
carries it in its final chunk (``choices: []`` and a ``usage`` object), which a
provider sends only when the request asked with ``stream_options.include_usage``.
The gateway asks when the client did not (`ask_for_usage`) and then removes
that extra chunk from what the client receives (`StreamUsage`), so the client
sees the stream it asked for.

`StreamUsage` splits the byte stream into Server-Sent Events as they arrive and
forwards complete events at once, so relaying stays chunk by chunk; its work
is linear in the bytes relayed for any event size and any chunking. An
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
    """Reads the usage out of an event stream; drops the usage chunk when the gateway asked.

    Linear in the bytes fed, whatever the chunking and the event sizes: an event
    ends at an empty line (``\\n`` or ``\\r\\n`` after a line end), and each feed
    searches only its own new bytes (plus the few before them a separator or
    ``"usage"`` may straddle). The buffer keeps a leading ``\\n`` so a separator
    at the very start of an event is found by the same two patterns. Only events
    holding ``"usage"`` are cut out and decoded; every other byte is forwarded in
    one slice per feed.
    """

    def __init__(self, strip: bool, event_max_bytes: int = EVENT_MAX_BYTES) -> None:
        self.strip = strip
        self.event_max_bytes = event_max_bytes
        self.usage: Usage | None = None
        self._buf = bytearray(b"\n")  # the sentinel line end, then the pending bytes
        self._usage_at = -1  # first '"usage"' in the buffer, or -1
        self._passthrough = False

    def feed(self, chunk: bytes) -> bytes:
        """The bytes of ``chunk`` to forward now (complete events; never the usage chunk)."""
        if self._passthrough:
            return chunk
        buf = self._buf
        old = len(buf)
        buf += chunk
        if self._usage_at < 0:
            self._usage_at = buf.find(_USAGE, max(1, old - len(_USAGE) + 1))
        lo = max(0, old - 2)
        end = max(_end(buf.rfind(_LF_LF, lo), 2), _end(buf.rfind(_LF_CR_LF, lo), 3))
        out = b""
        if end > 0:
            out = self._complete(end) if 0 <= self._usage_at < end else bytes(buf[1:end])
            del buf[1:end]
            self._usage_at = buf.find(_USAGE, 1) if self._usage_at >= 0 else -1
        if len(buf) - 1 > self.event_max_bytes:
            self._passthrough = True
            out += bytes(buf[1:])
            del buf[1:]
        return out

    def _complete(self, end: int) -> bytes:
        """``buf[1:end]`` (whole events) without the usage chunk, reading every usage event."""
        buf = self._buf
        out: list[bytes] = []
        emit = 1
        at = self._usage_at
        while 0 <= at < end:
            start = max(
                emit,
                _end(buf.rfind(_LF_LF, emit - 1, at), 2),
                _end(buf.rfind(_LF_CR_LF, emit - 1, at), 3),
            )
            ends = [_end(buf.find(_LF_LF, at, end), 2), _end(buf.find(_LF_CR_LF, at, end), 3)]
            stop = min(e for e in ends if e > 0)
            if self._consume(bytes(buf[start:stop])):
                out.append(bytes(buf[emit:start]))
                emit = stop
            at = buf.find(_USAGE, stop, end)
        out.append(bytes(buf[emit:end]))
        return b"".join(out)

    def finish(self) -> bytes:
        """Whatever is left when the stream ended (an unterminated last event)."""
        rest = bytes(self._buf[1:])
        del self._buf[1:]
        if rest and not self._passthrough and _USAGE in rest and self._consume(rest):
            return b""
        return rest

    def _consume(self, event: bytes) -> bool:
        """Record a usage chunk's usage; True when the event is to be dropped."""
        payload = _data_of(event)
        if payload is None or _USAGE not in payload:
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


_USAGE = b'"usage"'
_LF_LF = b"\n\n"
_LF_CR_LF = b"\n\r\n"


def _end(index: int, size: int) -> int:
    """The end of a separator found at ``index`` (0 when none was found)."""
    return index + size if index >= 0 else 0


def _data_of(event: bytes) -> bytes | None:
    """The joined ``data:`` lines of one event, or None when it has none."""
    lines = [
        line[5:].removeprefix(b" ")
        for line in event.replace(b"\r\n", b"\n").split(b"\n")
        if line.startswith(b"data:")
    ]
    return b"\n".join(lines) if lines else None
