"""`FaultMesh`: a `DemoMesh` whose sites reach each other through a `FaultProxy`.

The mesh runs under poll (so each gateway reports ingest feedback to its
operator) with every site's SWIM traffic crossing the proxy: each operator
binds its real SWIM port but advertises its proxy port
(``GRID_SWIM_ADVERTISE_ADDR``), and the GridNetwork's seeds in every store name
proxy ports. Cross-site signal polls cross a second proxy of the same core:
each operator advertises a proxy port in its metadata lane
(``GRID_SIGNALS_ADVERTISE_PORT``) that pipes to its real signals listener, so a
partition cuts the polls as it cuts SWIM (its gateway still polls it
directly, on the same site).

Every InferenceProvider of the mesh is given the same price, so what a client
saw answered 200 prices exactly without knowing which cluster served it.

Faults on processes are the mesh's own (`DemoMesh.kill_operator`, SIGKILL of a
gateway, SIGSTOP of the mock providers); a failing store is a writer holding
the site's SQLite file under ``BEGIN EXCLUSIVE`` (the operator's writes fail
with "database is locked" while reads go on); a skewed clock is the operator
restarted under libfaketime (``LD_PRELOAD`` with ``FAKETIME="+30s"``, Debian's
``libfaketime``), which shifts every clock read of that process by the offset,
so no production code carries a test-only clock seam.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import signal
import sqlite3
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp

from grid.adapters.store.sqlite import SqliteStore
from grid.demo import plan as p
from grid.demo.mesh import Child, DemoMesh
from grid.demo.ports import PortPicker
from grid.testing.fault_proxy import FaultCore, FaultProxy
from grid.testing.proc_sockets import tcp_owner

PRICE_IN = Decimal("0.2")
PRICE_OUT = Decimal("0.6")
"""USD per million tokens, for every provider of the mesh."""
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
MEMBERS = re.compile(r'^grid_swim_members\{state="alive"\} ([0-9.e+]+)$', re.M)
IN_FLIGHT = re.compile(r"^grid_gateway_upstream_in_flight(?:\{[^}]*\})? ([0-9.e+]+)$", re.M)


def exact_cents(prompt_tokens: int, completion_tokens: int) -> Decimal:
    """What one answer's usage costs, in cents, unrounded."""
    usd = (prompt_tokens * PRICE_IN + completion_tokens * PRICE_OUT) / 1_000_000
    return usd * 100


class FaultMesh:
    """Three (or more) real sites, their gateways, and a fault proxy between them."""

    def __init__(self, root: Path, sites: list[str], seed: int, **mesh_options: Any) -> None:
        self.mesh = DemoMesh(root, sites, signal_transport="poll", **mesh_options)
        self.seed = seed
        self.core = FaultCore(random.Random(seed))
        self.proxy: FaultProxy | None = None
        self.signals_proxy: FaultProxy | None = None
        """The proxy in front of every site's signals listener (cross-site polls)."""
        self._locks: dict[str, sqlite3.Connection] = {}

    @property
    def sites(self) -> list[str]:
        """The site names, in plan order."""
        return list(self.mesh.plan.sites)

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Prepare the stores, start the proxy, then every process."""
        mesh = self.mesh
        await mesh.prepare()
        taken = {port for s in mesh.plan.sites.values() for port in _site_ports(s)}
        taken |= {pp.port for pp in [*mesh.plan.providers, *mesh.plan.stand_ins]}
        picker = PortPicker()

        def free() -> int:
            port = picker()
            while port in taken:
                port = picker()
            taken.add(port)
            return port

        listen = {site: free() for site in mesh.plan.sites}
        signals = {site: free() for site in mesh.plan.sites}
        real = {name: s.swim_port for name, s in mesh.plan.sites.items()}
        self.proxy = await FaultProxy(self.core, real, listen, self._tcp_origin).start()
        real_signals = {name: s.signals_port for name, s in mesh.plan.sites.items()}
        self.signals_proxy = await FaultProxy(
            self.core, real_signals, signals, self._tcp_origin
        ).start()
        seeds = [self.proxy.address(s) for s in mesh.plan.sites]
        for name, plan in mesh.plan.sites.items():
            await _rewrite_store(plan.store, seeds)
            env = {
                "GRID_SWIM_ADVERTISE_ADDR": self.proxy.address(name),
                "GRID_SIGNALS_ADVERTISE_PORT": str(signals[name]),
            }
            child = Child(
                f"operator-{name}",
                mesh.operator_argv(plan),
                mesh.root / "logs" / f"operator-{name}.log",
                env,
            )
            mesh.children[child.name] = child
        await mesh.start()

    async def stop(self) -> None:
        """Release any store lock, stop every process, then the proxy."""
        for site in list(self._locks):
            self.unlock_store(site)
        await self.mesh.stop()
        for proxy in (self.proxy, self.signals_proxy):
            if proxy is not None:
                await proxy.stop()

    def partition(self, isolated: str) -> None:
        """Cut ``isolated`` from every other site: SWIM, push-pull and signal polls."""
        for proxy in (self.proxy, self.signals_proxy):
            assert proxy is not None
            proxy.partition(isolated)

    def heal(self) -> None:
        """Remove every partition."""
        self.core.heal()

    def _tcp_origin(self, source_port: int, proxy_port: int) -> str | None:
        pids = {}
        for name in self.mesh.plan.sites:
            child = self.mesh.children.get(f"operator-{name}")
            if child is not None and child.process is not None:
                pids[child.process.pid] = name
        owner = tcp_owner(source_port, proxy_port, pids)
        return None if owner is None else pids[owner]

    # -- faults ------------------------------------------------------------------

    async def lock_store(self, site: str) -> None:
        """Hold the site's SQLite file under an exclusive write transaction."""
        path = self.mesh.plan.sites[site].store

        def lock() -> sqlite3.Connection:
            conn = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
            conn.execute("BEGIN EXCLUSIVE")
            return conn

        self._locks[site] = await asyncio.to_thread(lock)

    def unlock_store(self, site: str) -> None:
        """End the exclusive transaction: the store accepts writes again."""
        conn = self._locks.pop(site)
        conn.execute("ROLLBACK")
        conn.close()

    async def restart_operator(self, site: str, clock_offset_s: int = 0) -> None:
        """Stop the site's operator (SIGTERM) and start it again, its clock shifted."""
        child = self.mesh.children[f"operator-{site}"]
        self.mesh.kill_operator(site, signal.SIGTERM)
        await self.mesh.wait_exit(child.name, timeout_s=20)
        for key in ("LD_PRELOAD", "FAKETIME", "FAKETIME_DONT_FAKE_MONOTONIC"):
            child.env.pop(key, None)
        if clock_offset_s:
            child.env.update(
                LD_PRELOAD=str(FAKETIME_LIB),
                FAKETIME=f"{clock_offset_s:+d}s",
                # The monotonic clock moves by the same constant: libfaketime 0.9.10
                # fails a thread's sleep with EINVAL when it fakes only the wall clock.
                FAKETIME_DONT_FAKE_MONOTONIC="0",
            )
        await self.mesh.start_operator(site)

    def kill_gateway(self, site: str) -> None:
        """SIGKILL the site's gateway and stop supervising it."""
        child = self.mesh.children[f"gateway-{site}"]
        child.supervised = False
        if child.process is not None and child.process.returncode is None:
            child.process.send_signal(signal.SIGKILL)

    @contextlib.contextmanager
    def providers_stopped(self) -> Iterator[None]:
        """SIGSTOP every mock provider for the block, so requests hang in flight."""
        procs = [
            c.process
            for name, c in self.mesh.children.items()
            if name.startswith("provider-") and c.process is not None
        ]
        for proc in procs:
            proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)

    # -- probes ------------------------------------------------------------------

    async def alive(self, http: aiohttp.ClientSession) -> dict[str, int | None]:
        """Each operator's count of alive SWIM members (None when it does not answer)."""
        seen: dict[str, int | None] = {}
        for name, site in self.mesh.plan.sites.items():
            text = await _text(http, f"http://127.0.0.1:{site.metrics_port}/metrics")
            found = MEMBERS.search(text or "")
            seen[name] = int(float(found.group(1))) if found else None
        return seen

    async def in_flight(self, http: aiohttp.ClientSession, site: str) -> float:
        """Requests the site's gateway has in flight upstream."""
        port = self.mesh.plan.sites[site].gateway_admin_port
        text = await _text(http, f"http://127.0.0.1:{port}/metrics")
        return sum(float(v) for v in IN_FLIGHT.findall(text or ""))

    async def network_status(self, site: str) -> dict[str, Any]:
        """The site's GridNetwork status, read from its store."""
        store = await SqliteStore.open(self.mesh.plan.sites[site].store)
        try:
            network = await store.get("GridNetwork", p.NETWORK)
        finally:
            await store.close()
        return dict(network.get("status") or {})

    async def create(self, site: str, doc: dict[str, Any]) -> None:
        """Create one object in the site's store (as an administrator would)."""
        store = await SqliteStore.open(self.mesh.plan.sites[site].store)
        try:
            await store.create(doc)
        finally:
            await store.close()


def _site_ports(site: p.SitePlan) -> tuple[int, ...]:
    return (site.swim_port, site.metrics_port, site.egress_port, site.gateway_port,
            site.gateway_admin_port, site.signals_port)  # fmt: skip


async def _rewrite_store(path: Path, seeds: list[str]) -> None:
    """Seeds at the proxy ports; one price for every provider."""
    store = await SqliteStore.open(path)
    try:
        network = await store.get("GridNetwork", p.NETWORK)
        network["spec"]["seeds"] = seeds
        await store.replace(network)
        for provider in await store.list("InferenceProvider"):
            provider["spec"]["cost"] = {
                "perMillionInputTokens": float(PRICE_IN),
                "perMillionOutputTokens": float(PRICE_OUT),
            }
            await store.replace(provider)
    finally:
        await store.close()


async def _text(http: aiohttp.ClientSession, url: str) -> str | None:
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
            return await resp.text() if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


async def wait_exit_quietly(proc: asyncio.subprocess.Process | None, timeout_s: float) -> None:
    """Wait for a process to exit, for at most ``timeout_s``."""
    if proc is not None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await proc.wait()
