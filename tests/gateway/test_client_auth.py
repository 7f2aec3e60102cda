"""Client identity at the gateway (§15), over real HTTP against a recording provider.

Each hostile case checks what the client gets and what reached the provider:
nothing at all for a refused request, and never the client's key or tenant
header for a served one.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import re
import ssl
import statistics
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from grid.core.identity import key_line
from grid.core.overlay.consumer import dump_yaml
from grid.demo.pki import DevCA
from grid.gateway.config import load_config
from grid.gateway.server import Gateway
from grid.gateway.settings import GatewaySettings
from grid.testing.gateway import MODEL, Upstream, candidate, overlay, render_praxis
from grid.testing.gateway import write_json as write_document
from grid.testing.poll import eventually

SERIES = re.compile(
    r'^grid_gateway_tenant_tokens_total\{cluster="([^"]+)",direction="([^"]+)",tenant="([^"]+)"\}'
    r" ([0-9.e+]+)$",
    re.M,
)
ACME_KEY = "grid-acme-0123456789abcdef0123456789abcdef"
GLOBEX_KEY = "grid-globex-fedcba9876543210fedcba9876543210"
RELOAD_S = 0.05


@dataclass
class Provider:
    """Answers chat requests with a usage; records every request's headers and body."""

    gzip_always: bool = False
    seen: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    runner: web.AppRunner | None = None
    port: int = 0

    async def start(self) -> Provider:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self.runner.addresses[0][1])
        return self

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append((dict(request.headers), body))
        usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
        if body.get("stream"):
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await out.prepare(request)
            await out.write(b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n')
            if (body.get("stream_options") or {}).get("include_usage") is True:
                await out.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
            await out.write(b"data: [DONE]\n\n")
            await out.write_eof()
            return out
        answer = json.dumps({"choices": [{"message": {"content": "hi"}}], "usage": usage}).encode()
        if self.gzip_always:
            return web.Response(
                body=gzip.compress(answer),
                headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
            )
        return web.Response(body=answer, content_type="application/json")

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@dataclass
class Rig:
    gateway: Gateway
    provider: Provider
    public: str
    admin: str
    keys: Path
    tmp: Path

    @property
    def url(self) -> str:
        scheme = "https" if self.gateway.config.client_auth.mode == "mtls" else "http"
        return f"{scheme}://{self.public}/v1/chat/completions"

    async def tokens(self, http: aiohttp.ClientSession) -> dict[tuple[str, str], int]:
        async with http.get(f"http://{self.admin}/metrics") as resp:
            text = await resp.text()
        return {(t, d): int(float(v)) for _c, d, t, v in SERIES.findall(text) if float(v)}

    async def metrics(self, http: aiohttp.ClientSession) -> str:
        async with http.get(f"http://{self.admin}/metrics") as resp:
            return await resp.text()


def _keys(*pairs: tuple[str, str]) -> str:
    return "".join(key_line(tenant, key) for tenant, key in pairs)


async def _rig(tmp: Path, client_auth: dict[str, Any], provider: Provider) -> Rig:
    await provider.start()
    upstream = Upstream("c1")
    upstream.port = provider.port
    rendered, public, admin = render_praxis(overlay(candidate("c1")), [upstream], tmp)
    document = rendered.document
    document["filter_chains"][0]["filters"][0] = {"filter": "client_auth", **client_auth}
    config = tmp / "praxis.yaml"
    config.write_text(dump_yaml(document))
    budgets = tmp / "grid-budgets.json"
    view = [{"tenant_id": t, "spend_ratio": 0.1} for t in ("acme", "globex")]
    write_document(budgets, {"network": "net", "budgets": view, "generated_at": "t"})
    settings = GatewaySettings(overlay_poll_interval_s=RELOAD_S, budgets_file=str(budgets))
    gateway = Gateway(load_config(config, 1 << 20), settings, config)
    await gateway.start()
    return Rig(gateway, provider, public, admin, tmp / "keys.yaml", tmp)


@pytest.fixture
async def keyed(tmp_path: Path) -> AsyncIterator[Rig]:
    keys = tmp_path / "keys.yaml"
    keys.write_text(_keys(("acme", ACME_KEY), ("globex", GLOBEX_KEY)))
    rig = await _rig(tmp_path, {"mode": "api_key", "keys_file": str(keys)}, Provider())
    yield rig
    await rig.gateway.stop()
    await rig.provider.stop()


@pytest.fixture
async def trusted(tmp_path: Path) -> AsyncIterator[Rig]:
    rig = await _rig(tmp_path, {"mode": "none", "default_tenant": "globex"}, Provider(True))
    yield rig
    await rig.gateway.stop()
    await rig.provider.stop()


def _body(**extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], **extra}


async def _post(
    http: aiohttp.ClientSession,
    rig: Rig,
    headers: dict[str, str] | list[tuple[str, str]],
    **extra: object,
) -> tuple[int, dict[str, Any]]:
    async with http.post(rig.url, json=_body(**extra), headers=headers) as resp:
        raw = await resp.read()
        try:
            return resp.status, json.loads(raw.split(b"\n\n")[0].removeprefix(b"data: "))
        except ValueError:
            return resp.status, {}


async def _raw(rig: Rig, head: bytes) -> int:
    """Send a hand-written request head (with a JSON body); the status line's code."""
    body = json.dumps(_body()).encode()
    host, port = rig.public.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + head
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    status = await reader.readline()
    writer.close()
    return int(status.split()[1])


# -- apiKey ---------------------------------------------------------------------------


async def test_a_forged_tenant_header_is_charged_to_the_keys_tenant(keyed: Rig) -> None:
    async with aiohttp.ClientSession() as http:
        headers = {"Authorization": f"Bearer {ACME_KEY}", "x-grid-tenant": "globex"}
        status, _answer = await _post(http, keyed, headers)
        assert status == 200
        status, _answer = await _post(
            http, keyed, {"x-api-key": GLOBEX_KEY, "x-grid-tenant": "acme"}
        )
        assert status == 200
        assert await keyed.tokens(http) == {
            ("acme", "input"): 11,
            ("acme", "output"): 5,
            ("globex", "input"): 11,
            ("globex", "output"): 5,
        }
        text = await keyed.metrics(http)
    for seen, _body_seen in keyed.provider.seen:
        lowered = {k.lower(): v for k, v in seen.items()}
        assert "x-grid-tenant" not in lowered and "x-api-key" not in lowered
        assert "authorization" not in lowered
    # The key is nowhere: not at the provider, not on /metrics, not on /snapshot.
    async with aiohttp.ClientSession() as http, http.get(f"http://{keyed.admin}/snapshot") as resp:
        snapshot = await resp.text()
    for key in (ACME_KEY, GLOBEX_KEY):
        assert key not in text and key not in snapshot
        assert all(key not in json.dumps(seen) for seen in keyed.provider.seen)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer "},
        {"Authorization": ""},
        {"x-api-key": ""},
        {"Authorization": "Bearer wrong-key"},
        {"Authorization": f"Basic {ACME_KEY}"},
        {"Authorization": f"Bearer {ACME_KEY}x"},
        {"Authorization": "Bearer " + "k" * 8000},
        {"x-api-key": ACME_KEY.upper()},
        # Two credentials are one too many, even when one is good.
        {"Authorization": f"Bearer {ACME_KEY}", "x-api-key": "wrong"},
    ],
)
async def test_a_missing_empty_or_wrong_key_gets_401_and_reaches_no_provider(
    keyed: Rig, headers: dict[str, str]
) -> None:
    async with aiohttp.ClientSession() as http:
        status, answer = await _post(http, keyed, {**headers, "x-grid-tenant": "acme"})
        text = await keyed.metrics(http)
    assert (status, answer["error"]["code"]) == (401, "unauthenticated")
    assert keyed.provider.seen == []
    assert 'grid_gateway_requests_total{outcome="unauthenticated"} 1.0' in text


async def test_a_megabyte_or_cr_lf_laden_key_is_refused_before_any_provider(keyed: Rig) -> None:
    huge = b"Authorization: Bearer " + b"k" * (1 << 20) + b"\r\n"
    # The listener refuses a head over its field limit before the gateway sees it.
    assert await _raw(keyed, huge) in (400, 401, 431)
    good = ACME_KEY.encode()
    for head in (
        b"Authorization: Bearer " + good[:10] + b"\r" + good[10:] + b"\r\n",
        b"Authorization: Bearer " + good[:10] + b"\n" + good[10:] + b"\r\n",
        b"Authorization: Bearer " + good + b"\r\n continued\r\n",
        b"x-api-key: " + good + b"\r\n\r\nx-api-key: " + good + b"\r\n",
    ):
        assert await _raw(keyed, head) in (400, 401), head
    assert keyed.provider.seen == []
    assert await _raw(keyed, b"Authorization: Bearer " + good + b"\r\n") == 200


async def test_a_wrong_key_takes_as_long_as_a_right_one(tmp_path: Path) -> None:
    """A key that matches the first of 30,000 entries is answered no sooner than a wrong
    one: the lookup is by digest, the same for every entry, and never a scan that stops
    at the match."""
    first, wrong = "grid-first-key", "grid-wrong-key"
    keys = tmp_path / "keys.yaml"
    filler = [(f"tenant-{i}", f"filler-{i}") for i in range(30_000)]
    keys.write_text(_keys(("acme", first), *filler))
    rig = await _rig(tmp_path, {"mode": "api_key", "keys_file": str(keys)}, Provider())
    try:
        lookup = rig.gateway.client_auth.keys.tenant
        assert lookup(first) == "acme" and lookup(wrong) is None
        timings: dict[str, list[float]] = {first: [], wrong: []}
        async with aiohttp.ClientSession() as http:
            for _round in range(25):
                for key in (first, wrong):  # interleaved, so load hits both alike
                    start = time.perf_counter()
                    await _post(http, rig, {"Authorization": f"Bearer {key}"})
                    timings[key].append(time.perf_counter() - start)
        right, refused = (statistics.median(timings[k]) for k in (first, wrong))
        # A scan stopping at the first entry would skip ~30,000 comparisons (milliseconds).
        assert right > 0.7 * refused, (right, refused)
        direct = {k: _median_call(lambda k=k: lookup(k)) for k in (first, wrong)}
        assert direct[first] > 0.7 * direct[wrong], direct
    finally:
        await rig.gateway.stop()
        await rig.provider.stop()


def _median_call(call: Callable[[], object]) -> float:
    samples = []
    for _ in range(15):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def test_a_rotated_key_stops_working_within_the_reload_interval(keyed: Rig) -> None:
    new_key = "grid-acme-rotated-key-0000000000000000"
    keyed.keys.write_text(_keys(("acme", new_key), ("globex", GLOBEX_KEY)))
    async with aiohttp.ClientSession() as http:

        async def old_refused() -> bool:
            status, _ = await _post(http, keyed, {"Authorization": f"Bearer {ACME_KEY}"})
            return status == 401

        started = time.monotonic()
        await eventually(old_refused, "the old key refused", timeout_s=10 * RELOAD_S + 2)
        assert time.monotonic() - started < 10 * RELOAD_S + 2
        assert (await _post(http, keyed, {"Authorization": f"Bearer {new_key}"}))[0] == 200


@pytest.mark.parametrize("damage", ["malformed", "unreadable", "deleted"])
async def test_a_broken_keys_file_keeps_the_last_good_set_and_says_so_once(
    keyed: Rig, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="grid.gateway.client_auth")
    keyed.keys.unlink()
    if damage == "malformed":
        keyed.keys.write_text("- {tenant: acme, sha256: not-hex}\n")
    elif damage == "unreadable":
        keyed.keys.mkdir()  # a directory where the file was: it does not read
    auth = keyed.gateway.client_auth
    await eventually(lambda: auth.reloads["rejected"] >= 1, "the damage seen")
    for _ in range(5):  # several more polls of the same damage
        auth.poll()
    async with aiohttp.ClientSession() as http:
        assert (await _post(http, keyed, {"Authorization": f"Bearer {ACME_KEY}"}))[0] == 200
        text = await keyed.metrics(http)
    assert 'grid_gateway_client_keys_reloads_total{outcome="rejected"} 1.0' in text
    assert "grid_gateway_client_keys 2.0" in text
    warnings = [r for r in caplog.records if "keys file does not load" in r.getMessage()]
    assert len(warnings) == 1
    assert ACME_KEY not in caplog.text


# -- none: the trusted header ----------------------------------------------------------


async def test_header_dodges_are_refused_or_metered_exactly(trusted: Rig) -> None:
    async with aiohttp.ClientSession() as http:
        two = [("x-grid-tenant", "acme"), ("x-grid-tenant", "globex")]
        status, answer = await _post(http, trusted, two)
        assert (status, answer["error"]["code"]) == (400, "ambiguous_tenant")
        for stream in ("true", 1, "yes", [True]):
            status, answer = await _post(http, trusted, {"x-grid-tenant": "acme"}, stream=stream)
            assert (status, answer["error"]["code"]) == (400, "invalid_stream")
        status, answer = await _post(
            http, trusted, {"x-grid-tenant": "acme"}, stream=True, stream_options="x"
        )
        assert status == 400
        assert trusted.provider.seen == []
        # Differently cased, and gzip asked for (the provider compresses regardless).
        headers = {"x-grid-tenant": " ACME ", "Accept-Encoding": "gzip"}
        assert (await _post(http, trusted, headers))[0] == 200
        assert (await _post(http, trusted, {"x-grid-tenant": "Acme"}, stream=True))[0] == 200
        assert (await _post(http, trusted, {}))[0] == 200  # the default tenant, globex
        assert await trusted.tokens(http) == {
            ("acme", "input"): 22,
            ("acme", "output"): 10,
            ("globex", "input"): 11,
            ("globex", "output"): 5,
        }
    for seen, body in trusted.provider.seen:
        lowered = {k.lower(): v for k, v in seen.items()}
        assert "x-grid-tenant" not in lowered
        assert lowered["accept-encoding"] == "identity"
        if body.get("stream"):
            assert body["stream_options"] == {"include_usage": True}


# -- mtls -----------------------------------------------------------------------------


async def test_mtls_takes_the_tenant_from_the_client_certificate(tmp_path: Path) -> None:
    ca = DevCA("client CA")
    tls = tmp_path / "tls"
    tls.mkdir()
    (tls / "ca.crt").write_bytes(ca.cert_pem)
    server = ca.issue("gateway")
    (tls / "tls.crt").write_bytes(server.cert_pem)
    (tls / "tls.key").write_bytes(server.key_pem)
    paths = {
        k: str(tls / f)
        for k, f in [("ca_path", "ca.crt"), ("cert_path", "tls.crt"), ("key_path", "tls.key")]
    }
    rig = await _rig(tmp_path, {"mode": "mtls", "tls": paths}, Provider())
    try:
        for name, issued in {
            "spiffe": ca.issue("ignored-cn", spiffe_path="tenant/acme"),
            "cn": ca.issue("globex"),
        }.items():
            (tmp_path / f"{name}.crt").write_bytes(issued.cert_pem)
            (tmp_path / f"{name}.key").write_bytes(issued.key_pem)
        for name in ("spiffe", "cn"):
            context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
            context.load_cert_chain(tmp_path / f"{name}.crt", tmp_path / f"{name}.key")
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as http:
                headers = {"x-grid-tenant": "someone-else"}
                assert (await _post(http, rig, headers))[0] == 200
        async with aiohttp.ClientSession() as http:
            assert await rig.tokens(http) == {
                ("acme", "input"): 11,
                ("acme", "output"): 5,
                ("globex", "input"): 11,
                ("globex", "output"): 5,
            }
        # Without a client certificate the handshake itself fails: nothing is routed.
        bare = ssl.create_default_context(cafile=str(tls / "ca.crt"))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=bare)) as http:
            with pytest.raises(aiohttp.ClientError):
                await _post(http, rig, {"x-grid-tenant": "acme"})
        assert len(rig.provider.seen) == 2
    finally:
        await rig.gateway.stop()
        await rig.provider.stop()


def test_the_keys_file_lines_are_yaml_with_tenant_and_digest() -> None:
    (entry,) = yaml.safe_load(key_line("acme", ACME_KEY))
    assert set(entry) == {"tenant", "sha256"} and entry["tenant"] == "acme"
    assert len(entry["sha256"]) == 64
