"""Test support for the gateway: real ``grid gateway`` processes and upstreams on loopback.

`Upstream` is a small aiohttp server in the test process that records what
reached it (headers, count) and answers in a chosen way: JSON, 503, an event
stream (slow or cut off mid-way), optionally over mTLS. `render_praxis` writes
a praxis.yaml with the same renderer the operator uses and runs
``python -m grid gateway --config`` on it and waits for its ``/ready``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from grid.core.overlay import Provenance, Scope, build_envelope, format_timestamp
from grid.core.overlay.consumer import RenderedConsumerConfig, render_consumer_config
from grid.core.overlay.ids import stable_id
from grid.core.resources.network_spec import ConsumerSpec
from grid.demo.pki import DevCA
from grid.demo.ports import free_port
from grid.testing.poll import eventually

MODEL = "llama"
SCOPE = Scope("net", "edge", "grid-system", "east")
READY_S = 20.0


@dataclass
class Upstream:
    """One recording backend; ``mode`` is json, unavailable, stream or broken_stream."""

    name: str
    mode: str = "json"
    chunks: int = 3
    pause_s: float = 0.0
    tls: ssl.SSLContext | None = None
    seen: list[dict[str, str]] = field(default_factory=list)
    peer_certs: list[Any] = field(default_factory=list)
    runner: web.AppRunner | None = None
    port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> Upstream:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        # A bare aiohttp site on purpose: the upstream must be able to misbehave
        # (cut a stream, stall) in ways Grid's own listener would never allow.
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=self.tls)
        await site.start()
        self.port = int(self.runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(dict(request.headers))
        if request.transport is not None:
            self.peer_certs.append(request.transport.get_extra_info("peercert"))
        body = await request.json()
        if self.mode == "unavailable":
            return web.json_response({"error": "busy"}, status=503)
        if self.mode == "json":
            return web.json_response({"served_by": self.name, "model": body["model"]})
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for i in range(self.chunks):
            await out.write(f"data: {self.name}-{i}\n\n".encode())
            if self.mode == "broken_stream" and i == 0:
                assert request.transport is not None
                request.transport.abort()
                return out
            if self.pause_s:
                await asyncio.sleep(self.pause_s)
        await out.write(b"data: [DONE]\n\n")
        await out.write_eof()
        return out


def candidate(cluster: str, admission: str = "new_and_existing", **extra: Any) -> dict[str, Any]:
    """A §5 candidate for MODEL at east, routed to ``cluster``."""
    return {
        "kind": "inference_model",
        "name": MODEL,
        "site": "east",
        "cluster": cluster,
        "fresh": True,
        "stable_id": stable_id("inference_model", MODEL, "east", cluster),
        "admission_state": admission,
        "selection_tier": "same_site",
        "rank": 0,
        **extra,
    }


def overlay(*candidates: dict[str, Any]) -> dict[str, Any]:
    ranked = [{**c, "rank": i} for i, c in enumerate(candidates)]
    return {
        "network": SCOPE.network,
        "local_site": SCOPE.local_site,
        "candidates": ranked,
        "generated_at": format_timestamp(datetime.now(UTC)),
    }


def envelope(document: dict[str, Any]) -> dict[str, Any]:
    provenance = Provenance("test", "net", None, None, datetime.now(UTC))
    return build_envelope(document, SCOPE, provenance)


def write_json(path: Path, document: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document))
    os.replace(tmp, path)


@dataclass
class GatewayProcess:
    """A running ``grid gateway`` child."""

    process: asyncio.subprocess.Process
    public: str
    admin: str
    log: Path

    def url(self, path: str = "/v1/chat/completions") -> str:
        return f"http://{self.public}{path}"

    async def snapshot(self, http: aiohttp.ClientSession) -> dict[str, Any]:
        async with http.get(f"http://{self.admin}/snapshot") as resp:
            return dict(await resp.json())

    async def metrics(self, http: aiohttp.ClientSession) -> str:
        async with http.get(f"http://{self.admin}/metrics") as resp:
            return await resp.text()

    async def stop(self) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(10):
                return await self.process.wait()
        except TimeoutError:
            self.process.kill()
            return await self.process.wait()


def render_praxis(
    document: dict[str, Any],
    upstreams: list[Upstream],
    tmp: Path,
    *,
    overlay_file: Path | None = None,
    tls_dir: Path | None = None,
    extra_endpoints: Sequence[dict[str, Any]] = (),
) -> tuple[RenderedConsumerConfig, str, str]:
    """The praxis.yaml for ``document`` with one endpoint per upstream; (config, public, admin)."""
    public, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    endpoints = [
        {
            "cluster": u.name,
            "address": u.address,
            "transport": {"mode": "mutual_tls", "sni": "localhost"}
            if u.tls is not None
            else {"mode": "plaintext"},
        }
        for u in upstreams
    ]
    config = ConsumerSpec.model_validate(
        {
            "enabled": True,
            "listenerHost": "127.0.0.1",
            "listenerPort": int(public.rsplit(":", 1)[1]),
            "adminAddress": admin,
            "credentialMountBase": str(tmp / "credentials"),
            "tlsCertMountPath": str(tls_dir or tmp / "tls"),
            "clusterEndpoints": [*endpoints, *extra_endpoints],
        }
    )
    rendered = render_consumer_config(
        document, SCOPE, config, None if overlay_file is None else str(overlay_file)
    )
    assert isinstance(rendered, RenderedConsumerConfig), rendered
    return rendered, public, admin


async def spawn_gateway(config_path: Path, public: str, admin: str, *extra: str) -> GatewayProcess:
    """Run ``grid gateway --config`` (plus ``extra`` flags) until its admin /ready answers 200.

    One process unless ``extra`` names ``--workers``: tests of routing order, affinity
    and counts need the one process that sees every request.
    """
    if "--workers" not in extra:
        extra = ("--workers", "1", *extra)
    log = config_path.with_suffix(".log")
    with open(log, "wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "grid",
            "gateway",
            "--config",
            str(config_path),
            *extra,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    gateway = GatewayProcess(process, public, admin, log)

    async def ready() -> bool:
        if process.returncode is not None:
            raise AssertionError(f"gateway exited {process.returncode}: {log.read_text()}")
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://{admin}/ready", timeout=aiohttp.ClientTimeout(total=1)) as r,
            ):
                return r.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    try:
        # mypy cannot solve `eventually`'s T when the check is async; the call is sound.
        await eventually(ready, "gateway ready", timeout_s=READY_S)  # type: ignore[arg-type]
    except BaseException:
        await gateway.stop()  # a gateway that never got ready is not left running
        raise
    return gateway


@dataclass(frozen=True)
class TlsFiles:
    """A CA and one leaf (SAN localhost) usable as both server and client certificate."""

    directory: Path
    ca: DevCA

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(
            ssl.Purpose.CLIENT_AUTH, cafile=self.directory / "ca.crt"
        )
        context.load_cert_chain(self.directory / "server.crt", self.directory / "server.key")
        context.verify_mode = ssl.CERT_REQUIRED
        return context
