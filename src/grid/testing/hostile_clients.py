"""Hostile HTTP clients on raw sockets, for the listener-policy tests.

`push_body` sends a request head and then body bytes for as long as the server
takes them, and counts the bytes the kernel accepted after the server's answer
began: what a server that keeps reading a refused body lets through. It runs
blocking in a thread, driving TLS through memory BIOs so every ciphertext byte
sent is counted.
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
import time
from dataclasses import dataclass

SEND_BUFFER_BYTES = 16 * 1024
"""The client's socket send buffer: small, so bytes counted as sent are bytes the
server's side took, not bytes parked in the client's kernel."""


@dataclass
class Pushed:
    """What one `push_body` saw."""

    answer: bytes
    """The first bytes of the server's answer."""
    sent_after_answer: int
    """Bytes the kernel accepted after the answer began."""
    closed: bool
    """The server closed (or reset) the connection."""


def _handshake(
    sock: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO
) -> None:
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            sock.sendall(outgoing.read())
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("closed during the handshake") from None
            incoming.write(data)
    sock.sendall(outgoing.read())


def push_body(
    port: int,
    head: bytes,
    chunk: bytes,
    *,
    context: ssl.SSLContext | None = None,
    cap_bytes: int = 64 * 1024 * 1024,
    stall_s: float = 1.0,
    limit_s: float = 15.0,
) -> Pushed:
    """Send ``head``, then ``chunk`` again and again until the server stops taking bytes.

    Stops when the server closes the connection, when nothing could be sent for
    ``stall_s`` after its answer began, after ``cap_bytes`` sent past the answer,
    or after ``limit_s``.
    """
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = None
    if context is not None:
        tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
        _handshake(sock, tls, incoming, outgoing)

    def seal(data: bytes) -> bytes:
        if tls is None:
            return data
        tls.write(data)
        return outgoing.read()

    pending = seal(head)
    answer, after, closed = b"", 0, False
    started = last_sent = time.monotonic()
    sock.setblocking(False)
    try:
        while time.monotonic() - started < limit_s and after <= cap_bytes:
            readable, writable, _ = select.select([sock], [sock], [], 0.05)
            if readable:
                data = sock.recv(65536)
                if not data:
                    closed = True
                    break
                answer += _open(tls, incoming, data)
            if writable:
                if not pending:
                    pending = seal(chunk)
                sent = sock.send(pending)
                pending = pending[sent:]
                last_sent = time.monotonic()
                if answer:
                    after += sent
            elif answer and time.monotonic() - last_sent > stall_s:
                break
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    finally:
        sock.close()
    return Pushed(answer, after, closed)


def _open(tls: ssl.SSLObject | None, incoming: ssl.MemoryBIO, data: bytes) -> bytes:
    if tls is None:
        return data
    incoming.write(data)
    plain = b""
    try:
        while chunk := tls.read(65536):
            plain += chunk
    except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
        pass
    return plain


def _connect(port: int, context: ssl.SSLContext | None, limit_s: float) -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=limit_s)
    if context is None:
        return raw
    return context.wrap_socket(raw, server_hostname="localhost")


def exchange(
    port: int, request: bytes, *, context: ssl.SSLContext | None = None, limit_s: float = 5.0
) -> bytes:
    """Send raw request bytes and read until the server closes (or ``limit_s``)."""
    with _connect(port, context, limit_s) as sock:
        sock.sendall(request)
        received = b""
        try:
            while data := sock.recv(65536):
                received += data
        except (ConnectionResetError, TimeoutError, ssl.SSLError):
            pass
        return received


def reset_mid_body(
    port: int, head: bytes, partial: bytes, *, context: ssl.SSLContext | None = None
) -> None:
    """Send a head with ``Expect: 100-continue``; once invited, part of the body, then RST."""
    with _connect(port, context, 5.0) as sock:
        sock.sendall(head)
        invited = sock.recv(65536)
        assert invited.startswith(b"HTTP/1.1 100"), invited
        sock.sendall(partial)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
