"""A local ``nats-server`` with JetStream for tests and benchmarks.

It runs Debian's ``nats-server`` binary on 127.0.0.1 with a file store in a
given directory, waits (polling with a deadline) until it accepts connections,
and can be stopped, killed and restarted on the same port and store, which is
how the reliability tests take the backbone away in the middle of a stream.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from grid.demo.ports import free_port

START_TIMEOUT_S = 10.0
"""How long `NatsServer.start` waits for the server to accept connections."""

STOP_TIMEOUT_S = 10.0
"""How long `NatsServer.stop` waits for a graceful exit before killing."""

_CANDIDATES = ("nats-server", "/usr/sbin/nats-server", "/usr/bin/nats-server")


def nats_server_binary() -> str | None:
    """The path of the ``nats-server`` binary, or None when it is not installed."""
    for candidate in _CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


class NatsServer:
    """One ``nats-server -js`` process bound to 127.0.0.1 with its store in ``store_dir``."""

    def __init__(self, store_dir: Path, port: int | None = None) -> None:
        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("nats-server is not installed (apt-get install nats-server)")
        self.binary = binary
        self.store_dir = store_dir
        self.port = port or free_port()
        self.log_path = store_dir.parent / f"{store_dir.name}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The client URL, ``nats://127.0.0.1:PORT``."""
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the server and wait until it accepts TCP connections."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        args = [self.binary, "-a", "127.0.0.1", "-p", str(self.port), "-js"]
        args += ["-sd", str(self.store_dir)]
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"nats-server exited early: {self._log_tail()}")
            if self._ready(offset) and self._accepts():
                return
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"nats-server did not become ready: {self._log_tail()}")

    def stop(self) -> None:
        """Stop gracefully (SIGTERM), killing after `STOP_TIMEOUT_S`."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def kill(self) -> None:
        """Kill the process (SIGKILL) and reap it."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def restart(self) -> None:
        """Stop, then start again on the same port and store directory."""
        self.stop()
        self.start()

    def _ready(self, offset: int) -> bool:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return b"Server is ready" in log.read()

    def _accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"
