"""`DemoMesh`: start, supervise and stop a local Grid mesh of real processes.

The mesh is what ``grid demo`` runs and what the end-to-end tests drive: a dev
PKI and SWIM key, one embedded store per site filled with that site's
resources, mock providers, one ``grid operator`` process per site on loopback,
and one ``grid gateway`` per site run from the ``praxis.yaml`` that site's
operator rendered (overlay-file mode). The supervisor restarts a child that
exits, as Kubernetes would, and `stop` ends every child process.

The demo Secrets (the provider token, the client keys' hashes) are "mounted" for
the gateways the way Kubernetes mounts a Secret: files under a private temporary
directory outside the demo directory, removed at `stop`. The client keys
themselves are in demo.json (``api_keys``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from grid.adapters.store.sqlite import SqliteStore
from grid.demo import plan as p
from grid.demo.network_edit import set_network_spec
from grid.demo.paces import operator_pace_args
from grid.demo.pki import DevPki, write_dev_pki
from grid.errors import AlreadyExists

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 45.0
RESTART_BACKOFF_S = 1.0
PRAXIS_TIMEOUT_S = 30.0
"""How long to wait for every site's praxis.yaml to list every cluster before the
gateways start anyway with what is rendered (a missing cluster is then skipped)."""
DEMO_TOKEN = b"sk-demo-placeholder-not-a-key"
"""The demo's placeholder API token: in the stores' Secret and the mounted file only."""
CREDENTIAL_SECRET = ("openai-credentials", "token")


@dataclass
class Child:
    """One supervised child process."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str]
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    supervised: bool = True


class DemoMesh:
    """A local mesh of operator and mock-provider processes under one directory."""

    def __init__(
        self,
        root: Path,
        sites: list[str],
        *,
        probe_interval: str = "500ms",
        suspicion_timeout: str = "2s",
        scrape_interval: str = "1s",
        gateways: bool = True,
        signal_transport: str = "gossip",
        signals_poll_interval_s: float = 1.0,
    ) -> None:
        self.root = root
        self.gateways = gateways
        self.credentials = Path(tempfile.mkdtemp(prefix="grid-demo-credentials-"))
        """The Secret mount of the demo gateways (outside the demo directory)."""
        self.api_keys = p.demo_keys(list(p.DEMO_BUDGETS))
        """Each demo tenant's client key (demo.json ``api_keys``); the gateways hold hashes."""
        self.signal_transport = signal_transport
        """The mode the GridNetwork declares (demo.json's ``signals`` follows it)."""
        self.signals_poll_interval_s = signals_poll_interval_s
        self.plan = p.plan_mesh(root, sites)
        self.probe_interval = probe_interval
        self.suspicion_timeout = suspicion_timeout
        self.scrape_interval = scrape_interval
        self.pki: DevPki | None = None
        self.children: dict[str, Child] = {}
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False
        self._described = False
        self.ui_url: str | None = None
        """The aggregated live view's URL once `grid demo` serves it (demo.json ``ui``)."""
        self.prometheus_url: str | None = None
        """The demo's Prometheus (``grid demo --prometheus``), listed in demo.json."""

    # -- preparation -----------------------------------------------------------

    async def prepare(self) -> None:
        """Write the PKI and fill each site's store with its resources.

        A demo is ephemeral: what an earlier run left under the demo directory
        (PKI, stores, overlays, logs) is removed first, since its certificates,
        fingerprints and ports no longer match this run.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        for stale in (
            self.plan.pki_dir,
            self.root / "logs",
            self.root / "join",
            *self._site_dirs(),
        ):
            shutil.rmtree(stale, ignore_errors=True)
        (self.root / "demo.json").unlink(missing_ok=True)
        self.pki = write_dev_pki(self.plan.pki_dir, list(self.plan.sites))
        network = p.network_doc(
            self.plan,
            probe_interval=self.probe_interval,
            suspicion_timeout=self.suspicion_timeout,
            credential_base=self.credentials,
            signal_transport=self.signal_transport,
        )
        sites = [
            p.site_doc(s, self.pki.sites[s.name].fingerprint) for s in self.plan.sites.values()
        ]
        secrets = [
            p.secret_doc("grid-swim-key", {"swim.key": self.pki.swim_key.read_bytes()}),
            p.secret_doc("grid-ca", {"ca.crt": self.pki.ca.read_bytes()}),
        ]
        mounts = {CREDENTIAL_SECRET: DEMO_TOKEN, p.CLIENT_KEYS_SECRET: p.keys_file(self.api_keys)}
        for (name, key), data in mounts.items():
            mounted = self.credentials / name / key
            mounted.parent.mkdir(parents=True, exist_ok=True)
            mounted.write_bytes(data)
            secrets.append(p.secret_doc(name, {key: data}))
        self._write_join_manifests(network, secrets[:2])
        first = next(iter(self.plan.sites))
        for site in self.plan.sites.values():
            site.root.mkdir(parents=True, exist_ok=True)
            providers = [p.provider_doc(pp, interval=self.scrape_interval) for pp in site.providers]
            if site.name == first:
                providers += p.third_party_docs(site.name)
            providers += p.agent_docs(site, interval=self.scrape_interval)
            await self._fill_store(site.store, [network, *sites, *providers, *secrets])

    def _write_join_manifests(self, network: dict[str, Any], secrets: list[dict[str, Any]]) -> None:
        """``DIR/join/``: what a site started by hand needs in its store (docs/operator.md).

        ``network.yaml`` is the demo's GridNetwork; ``secrets.yaml`` (mode 0600)
        the SWIM key and CA Secrets it references.
        """
        join = self.root / "join"
        join.mkdir(parents=True, exist_ok=True)
        (join / "network.yaml").write_text(yaml.safe_dump(network, sort_keys=False))
        fd = os.open(join / "secrets.yaml", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(yaml.safe_dump_all(secrets, sort_keys=False))

    def _site_dirs(self) -> list[Path]:
        return [site.root for site in self.plan.sites.values()]

    async def _fill_store(self, path: Path, docs: list[dict[str, Any]]) -> None:
        store = await SqliteStore.open(path)
        try:
            for doc in docs:
                with contextlib.suppress(AlreadyExists):
                    await store.create(doc)
        finally:
            await store.close()

    # -- processes --------------------------------------------------------------

    def _grid(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "grid", *args]

    def operator_argv(self, site: p.SitePlan) -> list[str]:
        """The command line of one site's operator."""
        assert self.pki is not None
        certs = self.pki.sites[site.name]
        return self._grid(
            "operator",
            "--site",
            site.name,
            "--store",
            f"sqlite:{site.store}",
            "--swim-bind",
            f"127.0.0.1:{site.swim_port}",
            "--metrics-bind",
            f"127.0.0.1:{site.metrics_port}",
            "--egress-bind",
            f"127.0.0.1:{site.egress_port}",
            "--overlay-dir",
            str(site.overlay_dir),
            "--ca",
            str(self.pki.ca),
            "--cert",
            str(certs.cert),
            "--key",
            str(certs.key),
            *operator_pace_args(),
            "--signals-bind",
            f"127.0.0.1:{site.signals_port}",
            "--signals-poll-interval",
            str(self.signals_poll_interval_s),
            *(
                ("--gateway-metrics", f"http://127.0.0.1:{site.gateway_admin_port}/metrics")
                if self.gateways
                else ()
            ),
        )

    async def start(self) -> None:
        """Start mock providers, then operators, then gateways, and wait until all are ready."""
        models = {"openai": p.API_MODEL}
        for provider in [*self.plan.providers, *self.plan.stand_ins]:
            argv = self._grid(
                "mock-provider",
                "--port",
                str(provider.port),
                "--model",
                models.get(provider.name, p.MODEL),
                "--profile",
                provider.profile,
                "--capacity",
                str(provider.capacity),
                "--service-time-ms",
                str(provider.service_time_ms),
                "--burst-period",
                "20",
            )
            await self._spawn(
                Child(f"provider-{provider.name}", argv, self._log(provider.name), {})
            )
        for name, argv in self.plan.agent_servers():  # the demo's MCP server and agent (§16)
            await self._spawn(Child(name, argv, self._log(name), {}))
        for site in self.plan.sites.values():
            await self.start_operator(site.name)
        self._supervisor = asyncio.create_task(self._supervise(), name="demo-supervisor")
        await self.wait_ready()
        if self.gateways:
            await self._wait_praxis()
            for site in self.plan.sites.values():
                await self.start_gateway(site.name)
            await self._wait_http(
                {
                    s: f"127.0.0.1:{p_.gateway_admin_port}/ready"
                    for s, p_ in self.plan.sites.items()
                },
                "gateways",
            )

    async def _wait_praxis(self) -> None:
        """Wait until every site's praxis.yaml lists every cluster (bounded)."""
        clusters = self.plan.cluster_count()
        deadline = time.monotonic() + PRAXIS_TIMEOUT_S
        while True:
            complete = [
                p.praxis_cluster_count(site.praxis) >= clusters for site in self.plan.sites.values()
            ]
            if all(complete):
                return
            if time.monotonic() > deadline:
                if not any(site.praxis.exists() for site in self.plan.sites.values()):
                    raise TimeoutError("no site rendered its praxis.yaml")
                log.warning("starting gateways before every praxis.yaml lists every cluster")
                return
            await asyncio.sleep(0.2)

    def _poll_flags(self, site: p.SitePlan) -> list[str]:
        """Under poll a site's gateway ranks by its operator's signals and reports feedback."""
        if self.signal_transport != "poll" or self.pki is None:
            return []
        c = self.pki.sites[site.name]
        return ["--operator", f"127.0.0.1:{site.signals_port}", "--cert", str(c.cert),
                "--key", str(c.key), "--ca", str(self.pki.ca)]  # fmt: skip

    async def start_gateway(self, site: str) -> None:
        """Start (or restart) one site's gateway; its counters survive a graceful stop."""
        plan = self.plan.sites[site]
        argv = self._grid(
            "gateway", "--config", str(plan.praxis), "--state-dir", str(plan.root / "gateway"),
            "--workers", "1", *self._poll_flags(plan),
        )  # fmt: skip
        name = f"gateway-{site}"
        await self._spawn(Child(name, argv, self._log(name), {}))

    def _log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    async def start_operator(self, site: str) -> None:
        """Start (or restart) one site's operator."""
        child = self.children.get(f"operator-{site}")
        if child is None:  # one of the demo's own sites (one started by hand already exists)
            argv = self.operator_argv(self.plan.sites[site])
            child = Child(f"operator-{site}", argv, self._log(f"operator-{site}"), {})
        await self._spawn(child)
        child.supervised = True
        if self._described:
            self.write_description()

    async def start_child(self, name: str, argv: list[str]) -> None:
        """Start one more supervised process, such as a site's ``grid operator`` started by hand.

        Named ``operator-{site}``, it is killed and restarted like the demo's own
        (`kill_operator`, `start_operator`) and stopped with the mesh.
        """
        child = Child(name, argv, self._log(name), {})
        await self._spawn(child)
        child.supervised = True

    async def _spawn(self, child: Child) -> None:
        child.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **child.env, "PYTHONUNBUFFERED": "1"}
        with open(child.log_path, "ab") as out:
            child.process = await asyncio.create_subprocess_exec(
                *child.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=env,
                start_new_session=True,
            )
        self.children[child.name] = child

    async def _supervise(self) -> None:
        while not self._stopping:
            for child in list(self.children.values()):
                proc = child.process
                if proc is None or proc.returncode is None or not child.supervised:
                    continue
                if self._stopping:
                    return
                child.restarts += 1
                log.warning("restarting %s (exit %s)", child.name, proc.returncode)
                await asyncio.sleep(RESTART_BACKOFF_S)
                # A test may have restarted it meanwhile (start_operator): respawn
                # only the very process that exited.
                if not self._stopping and child.supervised and child.process is proc:
                    await self._spawn(child)
                    if self._described:
                        self.write_description()
            await asyncio.sleep(0.2)

    async def declare_signal_transport(self, mode: str) -> None:
        """Declare ``mode`` on every site's GridNetwork, as an administrator would.

        The operators were started in the old mode, so each exits and the
        supervisor restarts it into the declared one (seed 000); demo.json then
        follows the declaration.
        """
        self.signal_transport = mode
        await self.edit_network_spec("signalTransport", {"mode": mode})

    async def edit_network_spec(self, field: str, value: Any) -> None:
        """Set one field of the GridNetwork's spec in every site's store."""
        await set_network_spec([site.store for site in self.plan.sites.values()], field, value)

    def kill_operator(self, site: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one operator and stop supervising it (tests restart it)."""
        self.kill_child(f"operator-{site}", sig)

    def kill_child(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal one child, unsupervised until `restart_child` (never two copies)."""
        child = self.children[name]
        child.supervised = False
        if child.process is not None and child.process.returncode is None:
            child.process.send_signal(sig)

    async def restart_child(self, name: str) -> None:
        """Start a child `kill_child` stopped, supervised again."""
        child = self.children[name]
        if child.process is not None:
            await child.process.wait()
        child.supervised = True
        await self._spawn(child)

    async def wait_exit(self, name: str, timeout_s: float = 10.0) -> int | None:
        """Wait for a child to exit and return its code."""
        proc = self.children[name].process
        assert proc is not None
        async with asyncio.timeout(timeout_s):
            return await proc.wait()

    async def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Poll every operator's /readyz until all answer 200."""
        urls = {s: f"127.0.0.1:{site.metrics_port}/readyz" for s, site in self.plan.sites.items()}
        await self._wait_http(urls, "operators", timeout_s)

    async def _wait_http(
        self, urls: dict[str, str], what: str, timeout_s: float = READY_TIMEOUT_S
    ) -> None:
        """Poll each ``host:port/path`` until all answer 200."""
        deadline = time.monotonic() + timeout_s
        pending = set(urls)
        async with aiohttp.ClientSession() as session:
            while pending:
                for site in list(pending):
                    url = f"http://{urls[site]}"
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                        async with session.get(url, timeout=aiohttp.ClientTimeout(total=1)) as r:
                            if r.status == 200:
                                pending.discard(site)
                if pending and time.monotonic() > deadline:
                    raise TimeoutError(f"{what} not ready: {', '.join(sorted(pending))}")
                if pending:
                    await asyncio.sleep(0.2)

    def describe(self) -> dict[str, Any]:
        """The ``.grid/demo/demo.json`` document (SPEC-DECISIONS §9)."""
        assert self.pki is not None
        sites = {}
        for name, site in self.plan.sites.items():
            proc = self.children[f"operator-{name}"].process
            sites[name] = {
                "pid": proc.pid if proc else None,
                "swim": f"127.0.0.1:{site.swim_port}",
                "signals": (
                    f"127.0.0.1:{site.signals_port}" if self.signal_transport == "poll" else None
                ),
                "metrics": f"127.0.0.1:{site.metrics_port}",
                "store": str(site.store),
                "overlay_dir": str(site.overlay_dir),
                "cert": str(self.pki.sites[name].cert),
                "key": str(self.pki.sites[name].key),
                "gateway": (gateway := self.gateway_address(name)),
                "gateway_admin": gateway and f"127.0.0.1:{site.gateway_admin_port}",
            }
        top = next((self.gateway_address(s) for s in self.plan.sites), None)
        described: dict[str, Any] = {"sites": sites, "ca": str(self.pki.ca), "gateway": top}
        described |= {"ui": self.ui_url, "api_keys": dict(self.api_keys)}
        described |= self.plan.agent_description(top)
        return described | ({"prometheus": self.prometheus_url} if self.prometheus_url else {})

    def gateway_address(self, site: str) -> str | None:
        """The site gateway's public ``host:port``, or None when it is not running."""
        if f"gateway-{site}" not in self.children:
            return None
        return f"127.0.0.1:{self.plan.sites[site].gateway_port}"

    async def routed_counts(self, session: aiohttp.ClientSession) -> dict[str, int]:
        """Requests each cluster's mock provider received through a gateway (/stats)."""
        counts: dict[str, int] = {}
        for provider in [*self.plan.providers, *self.plan.stand_ins]:
            url = f"http://127.0.0.1:{provider.port}/stats"
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError, KeyError):
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=1)) as r:
                    counts[provider.name] = int((await r.json())["routed"])
        return counts

    def write_description(self) -> Path:
        """Write demo.json atomically and return its path."""
        path = self.root / "demo.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.describe(), indent=2) + "\n")
        tmp.replace(path)
        self._described = True
        return path

    async def stop(self) -> None:
        """Stop supervising; SIGTERM every child, SIGKILL what outlives the grace period."""
        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        live = [c.process for c in self.children.values() if c.process is not None]
        for proc in live:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
        for proc in live:
            try:
                async with asyncio.timeout(8):
                    await proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        shutil.rmtree(self.credentials, ignore_errors=True)
