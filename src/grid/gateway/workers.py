"""``grid gateway --workers N``: N gateway processes on one port, and their supervisor.

One Python process serves one core. With ``--workers N`` (N > 1) the command
becomes a supervisor that starts N worker processes, each a whole `Gateway`
built from the same praxis.yaml, overlay file, budget view, credentials and
certificates, and each listening on the public port with ``SO_REUSEPORT``: the
kernel spreads new connections among them, and a connection stays with the
worker that accepted it. The supervisor holds the port bound (not listening) from
start to exit, so a port 0 resolves once and the workers share it.

What is per worker: in-flight counts, session affinity bindings, round-robin
turns, passive-health ejections, signals polls (under poll mode), and the tenant
counters; they are one worker's view, as of one gateway process. What is shared:
the files every worker reads (config, overlay, budgets, keys, credentials), and
the supervisor's admin listener, whose ``/metrics`` is the sum over workers
(`grid.gateway.worker_metrics`), ``/ready`` is 200 while a worker serves, and
``/snapshot`` is a worker's snapshot with a ``workers`` list. Ingest feedback
(§7) is reported by the first worker only (`GatewaySettings.feedback_enabled`).

Each worker has a private admin listener on ``127.0.0.1:0`` and a private state
directory in a temporary directory the supervisor removes at exit. A graceful
stop SIGTERMs every worker, waits for their drain, and merges their saved tenant
counters into the one state file (``--state-dir``). A worker that exits is started
again after a back-off (`WorkerSettings`); the others keep serving meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pickle
import shutil
import socket
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from grid.adapters.http_listener import HttpListener
from grid.adapters.runtime_internals import freeze_startup_heap
from grid.adapters.stop_signals import stop_event
from grid.core.address import format_address, parse_address
from grid.core.metering.budgets import DIRECTIONS, CounterKey
from grid.errors import GridError
from grid.gateway.config import PraxisConfig
from grid.gateway.metering import TenantMeter
from grid.gateway.server import Gateway
from grid.gateway.settings import GatewaySettings
from grid.gateway.signals_poll import SiteCredentials
from grid.gateway.worker_metrics import SeriesKey, WorkerMetrics

log = logging.getLogger(__name__)

WORKER_ADMIN = "127.0.0.1:0"
"""Each worker's private admin listener, read by the supervisor only."""
STATE_FILE = "tenant-tokens.json"
"""The tenant counters' file in a state directory (`Gateway`'s)."""
DIR_PREFIX = "grid-gateway-workers-"
"""The supervisor's private temporary directory: this prefix, its PID, a random tail."""
TOKENS = "grid_gateway_tenant_tokens"
"""The family a graceful stop saves (`grid.gateway.metering`)."""


class WorkerFailed(GridError):
    """A worker could not start: ``kind`` is ``listen`` or ``prepare``."""

    code = "worker_failed"

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass(frozen=True)
class WorkerSettings:
    """How the supervisor starts, restarts, reads and stops its workers."""

    start_timeout_s: float = 30.0
    """Seconds a worker may take from spawn to serving; past it, it counts as failed."""
    restart_initial_s: float = 0.5
    """Delay before restarting a worker that exited after running `stable_after_s`."""
    restart_max_s: float = 30.0
    """Cap of the delay, which doubles with each exit in quick succession. Longer spares
    the machine a crash loop; shorter restores capacity sooner."""
    stable_after_s: float = 10.0
    """A worker that ran this long resets the back-off when it exits."""
    scrape_timeout_s: float = 2.0
    """Seconds one worker's ``/metrics`` may take; a worker that misses it contributes
    its last counters and no gauges."""
    stop_grace_s: float = 5.0
    """Seconds beyond ``shutdown_timeout_secs`` a worker gets to drain before it is killed."""


def usable_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def worker_count(requested: int | None, budget: int) -> int:
    """Workers to run: ``requested`` (else the usable cores), at most one per connection slot."""
    return max(1, min(requested or usable_cores(), budget))


def connection_shares(budget: int, workers: int) -> list[int]:
    """The listener's connection cap divided among workers (the first ones get the rest)."""
    return [budget // workers + (1 if i < budget % workers else 0) for i in range(workers)]


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker process is given (pickled to it by its supervisor)."""

    index: int
    config_path: Path
    settings: GatewaySettings
    operator: str | None
    credentials: SiteCredentials | None
    otlp_endpoint: str | None
    listen: str
    """The public address, its port resolved by the supervisor."""


def worker_config(config: PraxisConfig, spec: WorkerSpec) -> PraxisConfig:
    """The worker's config: the shared public port and its private admin listener."""
    return replace(config, listen=spec.listen, admin=WORKER_ADMIN)


async def serve_worker(gateway: Gateway, channel: socket.socket) -> None:
    """Serve until SIGTERM/SIGINT or until the supervisor goes away, then drain."""
    _public, admin = await gateway.start()
    freeze_startup_heap()  # this process is one worker: what it built to start lasts
    channel.sendall(f"serving {admin}\n".encode())
    stop = stop_event()
    loop = asyncio.get_running_loop()
    # The supervisor never writes: the channel turns readable only at its end (EOF).
    loop.add_reader(channel.fileno(), stop.set)
    try:
        await stop.wait()
    finally:
        loop.remove_reader(channel.fileno())
        await gateway.stop()


@dataclass
class Slot:
    """One worker position: the process now in it and its history."""

    index: int
    spec: WorkerSpec
    process: asyncio.subprocess.Process | None = None
    admin: str | None = None
    """The worker's private admin address while it serves."""
    channel: asyncio.StreamWriter | None = None
    """The supervisor's end of the worker's channel, open while the worker runs."""
    started: float = 0.0
    restarts: int = 0
    failures: int = 0
    """Exits in quick succession (reset by a worker that ran `stable_after_s`)."""


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with ``SO_REUSEPORT`` and not listening: it holds
    the port (and resolves port 0) for the workers without taking any connection."""
    family, kind, proto, _name, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


class Supervisor:
    """Runs N workers of one gateway and serves their summed admin endpoints."""

    def __init__(
        self,
        config: PraxisConfig,
        settings: GatewaySettings,
        config_path: Path,
        command: Sequence[str],
        workers: int,
        *,
        operator: str | None = None,
        credentials: SiteCredentials | None = None,
        otlp_endpoint: str | None = None,
        worker_settings: WorkerSettings | None = None,
    ) -> None:
        """``command`` runs one worker: it reads a pickled `WorkerSpec` on stdin and is
        given its channel's descriptor as its last argument."""
        # The same checks a single process makes before it listens (a config or an
        # overlay that does not verify raises here); the state file is left for `start`.
        Gateway(config, replace(settings, state_dir=None), config_path, operator, credentials)
        self.config = config
        self.settings = settings
        self.command = list(command)
        self.timing = worker_settings or WorkerSettings()
        _sweep(Path(tempfile.gettempdir()))
        self._dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))
        shares = connection_shares(settings.listener.connections_max, workers)
        self.slots = [
            Slot(i, WorkerSpec(i, config_path, self._worker_settings(i, share), operator,
                               credentials, otlp_endpoint, config.listen))
            for i, share in enumerate(shares)
        ]  # fmt: skip
        state = Path(settings.state_dir) / STATE_FILE if settings.state_dir else None
        self.meter = TenantMeter(None, state)  # takes up (and removes) the saved counters
        self.book = WorkerMetrics(_token_series(self.meter.tokens))
        self.admin = HttpListener(self._admin_app(), settings.listener)
        self.stopping = False
        self._reserved: socket.socket | None = None
        self._keepers: list[asyncio.Task[None]] = []
        self._http: aiohttp.ClientSession | None = None

    def _worker_settings(self, index: int, share: int) -> GatewaySettings:
        s = self.settings
        return replace(
            s,
            listener=replace(s.listener, connections_max=share),
            reuse_port=True,
            feedback_enabled=s.feedback_enabled and index == 0,
            state_dir=str(self._dir / f"worker-{index}"),
        )

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> tuple[str, str]:
        """Start every worker and the admin listener; returns (public, admin) addresses."""
        host, port = parse_address(self.config.listen)
        self._reserved = reserve_port(host, port)
        public = format_address(host, int(self._reserved.getsockname()[1]))
        for slot in self.slots:
            slot.spec = replace(slot.spec, listen=public)
        self._http = aiohttp.ClientSession()
        try:
            await asyncio.gather(*(self._launch(slot) for slot in self.slots))
            admin = format_address(*await self.admin.start(*parse_address(self.config.admin)))
        except BaseException:
            await self.stop()
            raise
        self._keepers = [
            asyncio.create_task(self._keep(slot), name=f"grid-gateway-worker-{slot.index}")
            for slot in self.slots
        ]
        log.info("gateway workers serving", extra={"workers": len(self.slots), "public": public})
        return public, admin

    async def _launch(self, slot: Slot) -> None:
        """Spawn the slot's worker and wait until it serves (raises `WorkerFailed`)."""
        ours, theirs = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                *self.command,
                str(theirs.fileno()),
                stdin=asyncio.subprocess.PIPE,
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        slot.process, slot.started = process, asyncio.get_running_loop().time()
        assert process.stdin is not None
        process.stdin.write(pickle.dumps(slot.spec))
        process.stdin.close()
        ours.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=ours)
        slot.channel = writer  # kept open: closing it (or the supervisor's end) stops the worker
        try:
            async with asyncio.timeout(self.timing.start_timeout_s):
                line = (await reader.readline()).decode(errors="replace").split()
        except TimeoutError:
            process.kill()
            raise WorkerFailed("prepare", f"worker {slot.index} did not start in time") from None
        if len(line) == 2 and line[0] == "serving":
            slot.admin = line[1]
            return
        code = await process.wait()
        kind = "listen" if code == 1 else "prepare"
        raise WorkerFailed(kind, f"worker {slot.index} exited {code} before serving")

    async def _keep(self, slot: Slot) -> None:
        """Restart the slot's worker whenever it exits, with a back-off, until `stop`."""
        loop = asyncio.get_running_loop()
        while True:
            assert slot.process is not None
            code = await slot.process.wait()
            ran = loop.time() - slot.started
            self._left(slot)
            slot.failures = 0 if ran >= self.timing.stable_after_s else slot.failures + 1
            delay = min(self.timing.restart_max_s, self.timing.restart_initial_s * 2**slot.failures)
            log.warning(
                "gateway worker exited; restarting",
                extra={"worker": slot.index, "exit_code": code, "delay_s": delay},
            )
            await asyncio.sleep(delay)  # the back-off itself, not a wait for a condition
            slot.restarts += 1
            with contextlib.suppress(WorkerFailed):
                await self._launch(slot)

    def _left(self, slot: Slot) -> None:
        """Account for a worker gone: keep its counters; a saved file is its successor's."""
        slot.admin = None
        if slot.channel is not None:
            slot.channel.close()
            slot.channel = None
        saved = (Path(slot.spec.settings.state_dir or "") / STATE_FILE).exists()
        self.book.retire(slot.index, frozenset({TOKENS}) if saved else frozenset())

    async def stop(self) -> None:
        """SIGTERM every worker, wait for the drain (bounded), merge their counters, exit."""
        self.stopping = True
        for task in self._keepers:
            task.cancel()
        for task in self._keepers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        running = [s for s in self.slots if s.process and s.process.returncode is None]
        for slot in running:
            assert slot.process is not None
            with contextlib.suppress(ProcessLookupError):
                slot.process.terminate()
        drain_s = self.config.shutdown_timeout_s + self.timing.stop_grace_s
        await asyncio.gather(*(self._reap(slot, drain_s) for slot in running))
        self._save()
        await self.admin.stop()
        if self._http is not None:
            await self._http.close()
        if self._reserved is not None:
            self._reserved.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    async def _reap(self, slot: Slot, timeout_s: float) -> None:
        assert slot.process is not None
        try:
            async with asyncio.timeout(timeout_s):
                await slot.process.wait()
        except TimeoutError:
            log.warning(
                "gateway worker did not drain in time; killed", extra={"worker": slot.index}
            )
            slot.process.kill()
            await slot.process.wait()
        self._left(slot)

    def _save(self) -> None:
        """Merge what the workers saved with what was kept of the others; save it once."""
        tokens: dict[CounterKey, int] = {}
        for (name, labels), value in self.book.retained.items():
            pairs = dict(labels)
            direction = pairs.get("direction")
            if name == f"{TOKENS}_total" and direction in DIRECTIONS:
                key: CounterKey = (pairs["tenant"], pairs["cluster"], direction)
                tokens[key] = tokens.get(key, 0) + int(value)
        for slot in self.slots:
            saved = Path(slot.spec.settings.state_dir or "") / STATE_FILE
            for key, value in TenantMeter(None, saved).tokens.items():
                tokens[key] = tokens.get(key, 0) + value
        self.meter.tokens = tokens
        try:
            self.meter.save()
        except OSError as exc:
            log.warning("cannot save the tenant counters", extra={"error": exc.strerror})

    # -- admin ------------------------------------------------------------------

    def _admin_app(self) -> web.Application:
        app = web.Application(client_max_size=1024)
        app.router.add_get("/ready", self._ready)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/snapshot", self._snapshot)
        return app

    def _serving(self) -> list[Slot]:
        return [s for s in self.slots if s.admin is not None]

    async def _ready(self, _request: web.Request) -> web.Response:
        if self._serving() and not self.stopping:
            return web.json_response({"status": "ready", "workers": len(self._serving())})
        return web.json_response({"status": "not_ready"}, status=503)

    async def _read(self, slot: Slot, path: str) -> bytes | None:
        """GET ``path`` from the slot's worker; None when it does not answer 200 in time."""
        if slot.admin is None or self._http is None:
            return None
        timeout = aiohttp.ClientTimeout(total=self.timing.scrape_timeout_s)
        try:
            async with self._http.get(f"http://{slot.admin}{path}", timeout=timeout) as r:
                return await r.read() if r.status == 200 else None
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def _metrics(self, _request: web.Request) -> web.Response:
        bodies = await asyncio.gather(*(self._read(s, "/metrics") for s in self.slots))
        answered: set[int] = set()
        for slot, body in zip(self.slots, bodies, strict=True):
            if body is not None:
                self.book.observe(slot.index, body.decode())
                answered.add(slot.index)
        serving = GaugeMetricFamily(
            "grid_gateway_workers", "Worker processes serving.", value=len(self._serving())
        )
        restarts = CounterMetricFamily(
            "grid_gateway_worker_restarts",
            "Workers started again after they exited.",
            value=sum(s.restarts for s in self.slots),
        )
        return web.Response(
            body=self.book.exposition(answered, [serving, restarts]),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

    async def _snapshot(self, _request: web.Request) -> web.Response:
        document: dict[str, Any] = {}
        for slot in self._serving():
            body = await self._read(slot, "/snapshot")
            if body is not None:
                document = {**json.loads(body), "worker": slot.index}
                break
        document["workers"] = [
            {
                "index": s.index,
                "pid": s.process.pid if s.process is not None else None,
                "serving": s.admin is not None,
                "admin": s.admin,
                "restarts": s.restarts,
            }
            for s in self.slots
        ]
        return web.json_response(document, status=200 if "revision" in document else 503)


def _sweep(temp: Path) -> None:
    """Remove the private directories of supervisors that died without cleaning up."""
    for path in temp.glob(f"{DIR_PREFIX}*-*"):
        pid = path.name.removeprefix(DIR_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:  # another user's live process
            continue


def _token_series(tokens: dict[CounterKey, int]) -> dict[SeriesKey, float]:
    """Saved tenant counters as the samples a worker exposes them as."""
    return {
        (f"{TOKENS}_total", (("cluster", c), ("direction", d), ("tenant", t))): float(v)
        for (t, c, d), v in tokens.items()
    }
