"""`grid gateway` as a real process: routing, credentials, failover, streaming, reloads, drain."""

from __future__ import annotations

import asyncio
import io
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grid.demo.ports import free_port
from grid.testing.gateway import (
    MODEL,
    GatewayProcess,
    TlsFiles,
    Upstream,
    candidate,
    envelope,
    overlay,
    render_praxis,
    write_json,
)
from grid.testing.poll import eventually

pytestmark = pytest.mark.e2e

Upstreams = Callable[..., Awaitable[Upstream]]
Gateways = Callable[..., Awaitable[GatewayProcess]]
TOKEN = "mounted-token-7c1d"
CREDENTIAL = {
    "strategy": "bearer_token",
    "secretRef": {"name": "provider-token", "namespace": "grid-system", "key": "token"},
}


def chat(stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        body["stream"] = True
    return body


async def _start(
    gateways: Gateways,
    tmp: Path,
    document: dict[str, Any],
    ups: list[Upstream],
    **options: Any,
) -> GatewayProcess:
    rendered, public, admin = render_praxis(document, ups, tmp, **options)
    path = tmp / "praxis.yaml"
    path.write_text(rendered.text)
    return await gateways(path, public, admin)


def _closed_endpoint(cluster: str) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "address": f"127.0.0.1:{free_port()}",
        "transport": {"mode": "plaintext"},
    }


async def test_the_top_candidate_gets_the_mounted_credential_and_not_the_clients(
    tmp_path: Path, upstreams: Upstreams, gateways: Gateways, http: aiohttp.ClientSession
) -> None:
    top, second = await upstreams("top"), await upstreams("second")
    secret = tmp_path / "credentials" / "provider-token" / "token"
    secret.parent.mkdir(parents=True)
    secret.write_text(TOKEN + "\n")
    document = overlay(candidate("top", credential=CREDENTIAL), candidate("second"))
    gateway = await _start(gateways, tmp_path, document, [top, second])
    client = {
        "Authorization": "Bearer client-own-token",
        "x-api-key": "client-key",
        "x-ai-routing-candidate": "forged",
        "x-ai-routing-request-id": "forged",
    }
    async with http.post(gateway.url(), json=chat(), headers=client) as resp:
        assert resp.status == 200
        assert (await resp.json())["served_by"] == "top"
    assert len(top.seen) == 1 and second.seen == []
    seen = {k.lower(): v for k, v in top.seen[0].items()}
    assert seen["authorization"] == f"Bearer {TOKEN}"
    assert "x-api-key" not in seen
    snapshot = await gateway.snapshot(http)
    assert seen["x-ai-routing-candidate"] == snapshot["candidates"][0]["stable_id"]
    assert seen["x-ai-routing-request-id"] not in ("forged", "")
    assert seen["x-model"] == MODEL
    # The file is re-read when it changes (a rotated Secret).
    secret.write_text("rotated-token-2")
    async with http.post(gateway.url(), json=chat()) as resp:
        assert resp.status == 200
    assert top.seen[-1]["Authorization"] == "Bearer rotated-token-2"
    # A missing file fails that candidate over; an empty credential is never sent.
    secret.unlink()
    async with http.post(gateway.url(), json=chat()) as resp:
        assert (await resp.json())["served_by"] == "second"
    assert len(top.seen) == 2


async def test_failover_when_the_top_candidates_port_is_closed(
    tmp_path: Path, upstreams: Upstreams, gateways: Gateways, http: aiohttp.ClientSession
) -> None:
    alive = await upstreams("alive")
    document = overlay(candidate("dead"), candidate("alive"))
    gateway = await _start(
        gateways, tmp_path, document, [alive], extra_endpoints=[_closed_endpoint("dead")]
    )
    async with http.post(gateway.url(), json=chat()) as resp:
        assert resp.status == 200
        assert (await resp.json())["served_by"] == "alive"
    assert "grid_gateway_failovers_total 1.0" in await gateway.metrics(http)


async def test_failover_on_503_goes_at_most_two_further(
    tmp_path: Path, upstreams: Upstreams, gateways: Gateways, http: aiohttp.ClientSession
) -> None:
    busy = [await upstreams(f"busy{i}", mode="unavailable") for i in range(3)]
    last = await upstreams("fourth")
    document = overlay(*(candidate(u.name) for u in [*busy, last]))
    gateway = await _start(gateways, tmp_path, document, [*busy, last])
    async with http.post(gateway.url(), json=chat()) as resp:
        # Three tried (the first and two more); the third's 503 is relayed as it is.
        assert resp.status == 503
    assert [len(u.seen) for u in busy] == [1, 1, 1]
    assert last.seen == []


async def test_no_retry_once_bytes_were_streamed(
    tmp_path: Path, upstreams: Upstreams, gateways: Gateways, http: aiohttp.ClientSession
) -> None:
    broken = await upstreams("broken", mode="broken_stream")
    spare = await upstreams("spare", mode="stream")
    gateway = await _start(
        gateways, tmp_path, overlay(candidate("broken"), candidate("spare")), [broken, spare]
    )
    received = b""
    with pytest.raises(aiohttp.ClientPayloadError):
        async with http.post(gateway.url(), json=chat(stream=True)) as resp:
            assert resp.status == 200
            async for chunk in resp.content.iter_any():
                received += chunk
    assert received.startswith(b"data: broken-0")
    assert spare.seen == []


async def test_streams_pass_through_chunk_by_chunk(
    tmp_path: Path, upstreams: Upstreams, gateways: Gateways, http: aiohttp.ClientSession
) -> None:
    slow = await upstreams("slow", mode="stream", chunks=3, pause_s=0.4)
    gateway = await _start(gateways, tmp_path, overlay(candidate("slow")), [slow])
    began = time.monotonic()
    async with http.post(gateway.url(), json=chat(stream=True)) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        first = await resp.content.readuntil(b"\n\n")
        first_at = time.monotonic() - began
        rest = await resp.read()
    assert first == b"data: slow-0\n\n"
    assert first_at < 0.4, "the first event arrived only once the stream had ended"
    assert rest.endswith(b"data: [DONE]\n\n")


async def test_existing_only_keeps_bound_sessions_and_refuses_new_ones(
    tmp_path: Path, upstreams: Upstreams, gateways: Gateways, http: aiohttp.ClientSession
) -> None:
    a, b = await upstreams("a"), await upstreams("b")
    overlay_path = tmp_path / "grid-overlay.json"
    write_json(overlay_path, envelope(overlay(candidate("a"), candidate("b"))))
    gateway = await _start(
        gateways,
        tmp_path,
        overlay(candidate("a"), candidate("b")),
        [a, b],
        overlay_file=overlay_path,
    )
    async with http.post(gateway.url(), json=chat(), headers={"x-grid-session": "s1"}) as resp:
        assert (await resp.json())["served_by"] == "a"
    pressured = envelope(overlay(candidate("a", "existing_only"), candidate("b")))
    write_json(overlay_path, pressured)

    async def swapped() -> bool:
        return (await gateway.snapshot(http))["revision"] == pressured["revision"]["value"]

    await eventually(swapped, "the new overlay swapped in")
    async with http.post(gateway.url(), json=chat(), headers={"x-grid-session": "s1"}) as resp:
        assert (await resp.json())["served_by"] == "a"
    assert a.seen[-1]["x-ai-routing-revision"] == pressured["revision"]["value"]
    async with http.post(gateway.url(), json=chat(), headers={"x-grid-session": "s2"}) as resp:
        assert (await resp.json())["served_by"] == "b"
    async with http.post(gateway.url(), json=chat()) as resp:
        assert (await resp.json())["served_by"] == "b"
    # With only existing_only candidates left, a new session has no candidate.
    write_json(overlay_path, envelope(overlay(candidate("a", "existing_only"))))
    await eventually(lambda: _candidate_count(gateway, http, 1), "the last overlay swapped in")
    async with http.post(gateway.url(), json=chat(), headers={"x-grid-session": "s3"}) as resp:
        assert resp.status == 404
        assert (await resp.json())["error"]["code"] == "no_candidate"


async def _candidate_count(gateway: GatewayProcess, http: aiohttp.ClientSession, n: int) -> bool:
    return len((await gateway.snapshot(http))["candidates"]) == n


async def test_a_bad_overlay_reload_keeps_serving_the_old_revision(
    tmp_path: Path, upstreams: Upstreams, gateways: Gateways, http: aiohttp.ClientSession
) -> None:
    a = await upstreams("a")
    overlay_path = tmp_path / "grid-overlay.json"
    good = envelope(overlay(candidate("a")))
    write_json(overlay_path, good)
    gateway = await _start(
        gateways, tmp_path, overlay(candidate("a")), [a], overlay_file=overlay_path
    )
    tampered = envelope(overlay(candidate("a")))
    tampered["overlay"]["candidates"][0]["fresh"] = False
    write_json(overlay_path, tampered)

    async def rejected() -> bool:
        return (await gateway.snapshot(http))["reloads"]["last_rejection"] == "digest_mismatch"

    await eventually(rejected, "the tampered overlay rejected")
    assert (await gateway.snapshot(http))["revision"] == good["revision"]["value"]
    assert 'grid_gateway_overlay_reloads_total{result="rejected"} 1.0' in await gateway.metrics(
        http
    )
    async with http.post(gateway.url(), json=chat()) as resp:
        assert (await resp.json())["served_by"] == "a"


async def test_an_invalid_overlay_at_cold_start_refuses_to_start(tmp_path: Path) -> None:
    overlay_path = tmp_path / "grid-overlay.json"
    bad = envelope(overlay(candidate("a")))
    bad["schema_version"] = "2.0.0"
    write_json(overlay_path, bad)
    rendered, _public, _admin = render_praxis(
        overlay(candidate("a")),
        [],
        tmp_path,
        overlay_file=overlay_path,
        extra_endpoints=[_closed_endpoint("a")],
    )
    path = tmp_path / "praxis.yaml"
    path.write_text(rendered.text)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "grid", "gateway", "--config", str(path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(20):
        _out, err = await process.communicate()
    assert process.returncode == 2
    assert b"unsupported_schema_version" in err


async def test_refusals_have_defined_bodies(
    tmp_path: Path, upstreams: Upstreams, gateways: Gateways, http: aiohttp.ClientSession
) -> None:
    a = await upstreams("a")
    gateway = await _start(gateways, tmp_path, overlay(candidate("a")), [a])
    other = {**chat(), "model": "no-such-model"}
    async with http.post(gateway.url(), json=other) as resp:
        assert resp.status == 404
        body = await resp.json()
        assert body["error"]["code"] == "no_candidate" and body["error"]["message"]
    for bad in ({**chat(), "model": "   "}, {**chat(), "model": "m" * 257}, {"messages": []}):
        async with http.post(gateway.url(), json=bad) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["code"] == "invalid_model"
    async with http.post(gateway.url(), data=b"{not json") as resp:
        assert resp.status == 400
    async with http.post(gateway.url(), data=io.BytesIO(b"x" * (4 * 1024 * 1024 + 1))) as resp:
        assert resp.status == 413
        assert (await resp.json())["error"]["code"] == "body_too_large"
    assert a.seen == []


async def test_mutual_tls_clusters_present_the_gateway_certificate(
    tmp_path: Path,
    upstreams: Upstreams,
    gateways: Gateways,
    http: aiohttp.ClientSession,
    tls_files: TlsFiles,
) -> None:
    secure = await upstreams("secure", tls=tls_files.server_context())
    gateway = await _start(
        gateways, tmp_path, overlay(candidate("secure")), [secure], tls_dir=tls_files.directory
    )
    async with http.post(gateway.url(), json=chat()) as resp:
        assert resp.status == 200
        assert (await resp.json())["served_by"] == "secure"
    peer = secure.peer_certs[0]
    assert peer is not None, "the upstream saw no client certificate"
    assert ("DNS", "localhost") in peer["subjectAltName"]


async def test_sigterm_drains_an_in_flight_stream_within_the_shutdown_timeout(
    tmp_path: Path, upstreams: Upstreams, gateways: Gateways, http: aiohttp.ClientSession
) -> None:
    slow = await upstreams("slow", mode="stream", chunks=6, pause_s=0.25)
    gateway = await _start(gateways, tmp_path, overlay(candidate("slow")), [slow])
    async with http.post(gateway.url(), json=chat(stream=True)) as resp:
        assert await resp.content.readuntil(b"\n\n") == b"data: slow-0\n\n"
        stopped_at = time.monotonic()
        gateway.process.send_signal(signal.SIGTERM)
        rest = await resp.read()
    assert rest.endswith(b"data: [DONE]\n\n")
    assert rest.count(b"data: slow-") == 5
    async with asyncio.timeout(10):
        code = await gateway.process.wait()
    assert code == 0
    assert time.monotonic() - stopped_at < 5 + 2
    with pytest.raises(aiohttp.ClientConnectionError):
        async with http.post(gateway.url(), json=chat()) as late:
            await late.read()


async def test_a_cluster_that_joins_later_is_taken_up_from_the_rewritten_config(
    tmp_path: Path, upstreams: Upstreams, gateways: Gateways, http: aiohttp.ClientSession
) -> None:
    a, b = await upstreams("a"), await upstreams("b")
    overlay_path = tmp_path / "grid-overlay.json"
    write_json(overlay_path, envelope(overlay(candidate("a"))))
    rendered, public, admin = render_praxis(
        overlay(candidate("a")), [a], tmp_path, overlay_file=overlay_path
    )
    config = tmp_path / "praxis.yaml"
    config.write_text(rendered.text)
    gateway = await gateways(config, public, admin)
    # Without b in the running config, a candidate on b is skipped like an unreachable one.
    write_json(overlay_path, envelope(overlay(candidate("b"), candidate("a"))))
    await eventually(lambda: _candidate_count(gateway, http, 2), "the two-candidate overlay")
    async with http.post(gateway.url(), json=chat()) as resp:
        assert (await resp.json())["served_by"] == "a"
    grown, _p, _a = render_praxis(
        overlay(candidate("b"), candidate("a")), [a, b], tmp_path, overlay_file=overlay_path
    )
    # The same listener and admin addresses as the running file, with b added.
    text = grown.text.replace(_p, public).replace(_a, admin)
    tmp = config.with_name("praxis.yaml.tmp")
    tmp.write_text(text)
    tmp.replace(config)

    async def served_by_b() -> bool:
        async with http.post(gateway.url(), json=chat()) as resp:
            return bool((await resp.json())["served_by"] == "b")

    await eventually(served_by_b, "the rewritten config's cluster b serves")
