"""The listener policy on the metrics listener and the mock provider, as processes.

The metrics/health listener runs in a child process limited to 1,024 file
descriptors; 2,000 slow connections (partial heads and silent sockets) must not
stop it serving ``/healthz``. A credential in a malformed header must never
reach stderr (the JSON log) of the metrics listener or the mock provider.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from grid.testing.hostile_clients import exchange
from grid.testing.poll import eventually_blocking

SLOW_CONNECTIONS = 2000
NOFILE = 1024
HEALTH_SCRIPT = """
import asyncio
from prometheus_client import CollectorRegistry
from grid.adapters.health_server import HealthServer
from grid.operator import logs

async def main():
    logs.configure("debug")
    server = HealthServer(CollectorRegistry())
    host, port = await server.start("127.0.0.1", 0)
    print(port, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


@contextlib.contextmanager
def _process(
    args: list[str], limit_fds: bool = False
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_limit_fds if limit_fds else None,
    )
    try:
        assert proc.stdout is not None
        yield proc, proc.stdout.readline()
    finally:
        if proc.returncode is None:
            proc.terminate()
        proc.wait(10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _stderr(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    return err


def _healthz(port: int) -> bytes:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    try:
        return exchange(port, request, limit_s=2.0)
    except OSError:
        return b""


def _open_slow(port: int, index: int) -> socket.socket | None:
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError:
        return None
    if index % 2:
        with contextlib.suppress(OSError):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: ")  # a head that never ends
    return sock


@pytest.fixture
def many_fds() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, SLOW_CONNECTIONS + 1024)
    if wanted < SLOW_CONNECTIONS + 256:
        pytest.skip("the test process cannot open enough sockets")
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_metrics_listener_at_1024_fds_survives_2000_slow_connections(
    many_fds: None,
) -> None:
    with _process([sys.executable, "-c", HEALTH_SCRIPT], limit_fds=True) as (proc, line):
        port = int(line)
        slow = [_open_slow(port, i) for i in range(SLOW_CONNECTIONS)]
        try:
            # Slots of slow connections are taken back at once (eviction), not only
            # after their header deadline (5 s).
            def served() -> bool:
                assert proc.poll() is None, "the listener exited"
                return _healthz(port).startswith(b"HTTP/1.1 200")

            eventually_blocking(served, "/healthz served", timeout_s=4, interval_s=0.1)
            assert len(os.listdir(f"/proc/{proc.pid}/fd")) < NOFILE
        finally:
            for sock in slow:
                if sock is not None:
                    sock.close()
        assert proc.poll() is None
        err = _stderr(proc)
    assert "Too many open files" not in err and "Traceback" not in err


MALFORMED = (
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-planted-secret\x01\r\n\r\n"
)


def _assert_refused_quietly(port: int, proc: subprocess.Popen[str]) -> None:
    answer = exchange(port, MALFORMED)
    assert answer.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request"), answer[:80]
    assert b"sk-planted" not in answer
    err = _stderr(proc)
    assert "sk-planted" not in err and "Traceback" not in err
    assert '"reason": "' in err  # the refusal is logged, by its stable reason


def test_a_credential_in_a_malformed_header_never_reaches_the_metrics_log() -> None:
    with _process([sys.executable, "-c", HEALTH_SCRIPT]) as (proc, line):
        _assert_refused_quietly(int(line), proc)


def test_a_credential_in_a_malformed_header_never_reaches_the_mock_provider_log() -> None:
    args = [sys.executable, "-m", "grid", "mock-provider", "--port", "0", "--model", "m"]
    with _process(args) as (proc, line):
        port = int(line.split("http://", 1)[1].split()[0].rpartition(":")[2])
        _assert_refused_quietly(port, proc)
